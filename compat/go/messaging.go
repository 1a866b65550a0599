package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// quiet is how long a receive waits before it concludes that nothing more is coming. Only used where
// a scenario must observe an absence; where messages are expected the wait ends with the last one.
const quiet = 1500 * time.Millisecond

// expectWait bounds the wait for a message that should come.
const expectWait = 10 * time.Second

// receiveN receives up to n messages, each within wait; fewer when one does not come in time.
func receiveN(consumer pulsar.Consumer, n int, wait time.Duration) []pulsar.Message {
	var received []pulsar.Message
	for len(received) < n {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		message, err := consumer.Receive(ctx)
		cancel()
		if err != nil {
			break
		}
		received = append(received, message)
	}
	return received
}

// readN reads up to n messages from a reader, each within wait.
func readN(reader pulsar.Reader, n int, wait time.Duration) []pulsar.Message {
	var read []pulsar.Message
	for len(read) < n {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		message, err := reader.Next(ctx)
		cancel()
		if err != nil {
			break
		}
		read = append(read, message)
	}
	return read
}

// receiveConcurrently drains every consumer at once until each has been quiet for `quiet`, so that
// a Shared or Key_Shared dispatcher sees every consumer with free permits.
func receiveConcurrently(consumers []pulsar.Consumer) [][]pulsar.Message {
	result := make([][]pulsar.Message, len(consumers))
	var wg sync.WaitGroup
	for i, consumer := range consumers {
		wg.Add(1)
		go func(i int, consumer pulsar.Consumer) {
			defer wg.Done()
			for {
				ctx, cancel := context.WithTimeout(context.Background(), quiet)
				message, err := consumer.Receive(ctx)
				cancel()
				if err != nil {
					return
				}
				result[i] = append(result[i], message)
				if ackErr := consumer.Ack(message); ackErr != nil {
					return
				}
			}
		}(i, consumer)
	}
	wg.Wait()
	return result
}

func payloads(messages []pulsar.Message) []string {
	values := make([]string, len(messages))
	for i, message := range messages {
		values[i] = string(message.Payload())
	}
	return values
}

func numbered(prefix string, n int) []string {
	values := make([]string, n)
	for i := range values {
		values[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return values
}

// sendAll sends each payload synchronously (each its own entry, no batching) and returns the ids.
func sendAll(producer pulsar.Producer, values []string) ([]pulsar.MessageID, error) {
	ids := make([]pulsar.MessageID, len(values))
	for i, value := range values {
		id, err := producer.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(value)})
		if err != nil {
			return nil, fmt.Errorf("send %s: %w", value, err)
		}
		ids[i] = id
	}
	return ids, nil
}

func produce(client pulsar.Client, topic string, values []string) ([]pulsar.MessageID, error) {
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		return nil, fmt.Errorf("create producer on %s: %w", topic, err)
	}
	defer producer.Close()
	return sendAll(producer, values)
}

func subscribe(client pulsar.Client, options pulsar.ConsumerOptions) (pulsar.Consumer, error) {
	consumer, err := client.Subscribe(options)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s to %s (%v): %w", options.SubscriptionName, options.Topic, options.Type, err)
	}
	return consumer, nil
}

func ackAll(consumer pulsar.Consumer, messages []pulsar.Message) error {
	for _, message := range messages {
		if err := consumer.Ack(message); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}
