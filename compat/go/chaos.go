package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strconv"
	"sync"

	"github.com/apache/pulsar-client-go/pulsar"
)

// chaosProduce is a producer that goes on through a broker's failure (tests/chaos/workload.py): one
// message per line of stdin, the line being its key, message i carrying property "i" and the key, as
// tests/e2e/churn.py's publisher does. It prints {"i": i, "key": key} once the broker receipted message i
// and {"i": i, "failed": "..."} when its send failed, each line as it happens: the test counts only
// receipted messages, and paces and ends the sending by what it writes (the end of stdin flushes).
func chaosProduce(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	producer, err := client.CreateProducer(pulsar.ProducerOptions{
		Topic:              e.topic("chaos"),
		DisableBatching:    true,
		MaxPendingMessages: 1000,
	})
	if err != nil {
		return nil, err
	}
	defer producer.Close()
	var out sync.Mutex
	encoder := json.NewEncoder(os.Stdout)
	var receipted, failed int
	// One line per outcome, as it happens; the callbacks run on the client's goroutines.
	emit := func(line observed, count *int) {
		out.Lock()
		defer out.Unlock()
		*count++
		_ = encoder.Encode(line)
	}
	input := bufio.NewScanner(os.Stdin)
	sent := 0
	for ; input.Scan(); sent++ {
		index, key := sent, input.Text()
		message := &pulsar.ProducerMessage{
			Payload:    []byte(strconv.Itoa(index)),
			Key:        key,
			Properties: map[string]string{"i": strconv.Itoa(index)},
		}
		// SendAsync blocks while MaxPendingMessages are in flight, as the Python producer does.
		producer.SendAsync(context.Background(), message, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				emit(observed{"i": index, "failed": err.Error()}, &failed)
			} else {
				emit(observed{"i": index, "key": key}, &receipted)
			}
		})
	}
	flushErr := producer.FlushWithCtx(context.Background())
	out.Lock()
	defer out.Unlock()
	return observed{"sent": sent, "receipted": receipted, "failed": failed, "flush": errorText(flushErr)}, input.Err()
}
