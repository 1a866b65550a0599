package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// readersInBatch: a reader started at a message inside a batch reads from the next message of the
// batch (or from that message, inclusive); a reader from the latest message, inclusive, reads the
// last message of a plain and of a batched topic; a reader's SeekByTime reads again from a publish time.
func readersInBatch(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	batched := e.topic("batched")
	batchIDs, err := sendBatch(client, batched, numbered("b", 10))
	if err != nil {
		return nil, err
	}
	plain := e.topic("plain")
	plainIDs, err := producePaced(client, plain, numbered("m", 10))
	if err != nil {
		return nil, err
	}
	result := observed{"batch_index_of_b4": batchIDs[4].BatchIdx()}
	starts := []struct {
		name      string
		topic     string
		start     pulsar.MessageID
		inclusive bool
	}{
		{"after_b4", batched, batchIDs[4], false},
		{"at_b4_inclusive", batched, batchIDs[4], true},
		{"latest_inclusive_plain", plain, pulsar.LatestMessageID(), true},
		{"latest_inclusive_batched", batched, pulsar.LatestMessageID(), true},
	}
	// The readers read at once: each ends with a quiet period, which they then spend together.
	read := make([][]string, len(starts))
	errs := make([]error, len(starts))
	var wg sync.WaitGroup
	for i, start := range starts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := client.CreateReader(pulsar.ReaderOptions{
				Topic: start.topic, StartMessageID: start.start, StartMessageIDInclusive: start.inclusive,
			})
			if err != nil {
				errs[i] = fmt.Errorf("reader %s: %w", start.name, err)
				return
			}
			defer r.Close()
			read[i] = payloads(readN(r, 10, quiet))
		}()
	}
	wg.Wait()
	for i, start := range starts {
		if errs[i] != nil {
			return nil, errs[i]
		}
		result[start.name] = read[i]
	}
	r, err := client.CreateReader(pulsar.ReaderOptions{Topic: plain, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	all := readN(r, 10, expectWait)
	if len(all) != 10 {
		return nil, fmt.Errorf("reader read %d of 10 before its seek", len(all))
	}
	if all[6].ID().EntryID() != plainIDs[6].EntryID() {
		return nil, fmt.Errorf("read %s where m-6 was sent", all[6].ID())
	}
	if err := r.SeekByTime(all[6].PublishTime()); err != nil {
		return nil, fmt.Errorf("reader seek by time: %w", err)
	}
	result["after_seek_to_m6_publish_time"] = payloads(readN(r, 10, quiet))
	return result, nil
}

// producePaced sends each value as its own entry, a few milliseconds apart, so that every message
// has a publish time of its own.
func producePaced(client pulsar.Client, topic string, values []string) ([]pulsar.MessageID, error) {
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		return nil, fmt.Errorf("create producer on %s: %w", topic, err)
	}
	defer producer.Close()
	ids := make([]pulsar.MessageID, len(values))
	for i, value := range values {
		time.Sleep(5 * time.Millisecond)
		id, err := producer.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(value)})
		if err != nil {
			return nil, fmt.Errorf("send %s: %w", value, err)
		}
		ids[i] = id
	}
	return ids, nil
}
