package main

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// reader: a reader from the earliest message reads everything in order; from a message id it starts
// after that message, or at it when inclusive; from the latest it reads only what comes next.
func reader(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	topic := e.topic("read")
	ids, err := produce(client, topic, numbered("m", 10))
	if err != nil {
		return nil, err
	}
	result := observed{}
	starts := []struct {
		name      string
		start     pulsar.MessageID
		inclusive bool
	}{
		{"earliest", pulsar.EarliestMessageID(), false},
		{"after_m4", ids[4], false},
		{"at_m4_inclusive", ids[4], true},
	}
	for _, start := range starts {
		r, err := client.CreateReader(pulsar.ReaderOptions{
			Topic: topic, StartMessageID: start.start, StartMessageIDInclusive: start.inclusive,
		})
		if err != nil {
			return nil, fmt.Errorf("reader %s: %w", start.name, err)
		}
		result[start.name] = payloads(readN(r, 10, quiet))
		r.Close()
	}
	latest, err := client.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.LatestMessageID()})
	if err != nil {
		return nil, err
	}
	defer latest.Close()
	result["latest_has_next_before_send"] = latest.HasNext()
	if _, err := produce(client, topic, []string{"after-latest"}); err != nil {
		return nil, err
	}
	result["latest"] = payloads(readN(latest, 1, expectWait))
	return result, nil
}

// seek: a consumer that has read everything seeks back to a message id, then to a publish time, and
// receives again from there.
func seek(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	topic := e.topic("seek")
	consumer, err := subscribe(client, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		return nil, err
	}
	defer producer.Close()
	var ids []pulsar.MessageID
	for i := 0; i < 10; i++ {
		// Distinct publish times, so that a seek by time has one right answer.
		time.Sleep(5 * time.Millisecond)
		id, err := producer.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%d", i))})
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	all := receiveN(consumer, 10, expectWait)
	if err := ackAll(consumer, all); err != nil {
		return nil, err
	}
	result := observed{"before_seek": payloads(all)}
	if err := consumer.Seek(ids[3]); err != nil {
		return nil, fmt.Errorf("seek to message id: %w", err)
	}
	afterID := receiveN(consumer, 10, quiet)
	result["after_seek_to_m3_id"] = payloads(afterID)
	if err := ackAll(consumer, afterID); err != nil {
		return nil, err
	}
	publishTime := all[6].PublishTime()
	if err := consumer.SeekByTime(publishTime); err != nil {
		return nil, fmt.Errorf("seek by time: %w", err)
	}
	result["after_seek_to_m6_publish_time"] = payloads(receiveN(consumer, 10, quiet))
	return result, nil
}

// readPython: reads what the Python client produced to {name}-from-python (the test sends it first):
// values, keys, properties, and whether batched messages came as batches.
func readPython(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	topic := e.topic("from-python")
	consumer, err := subscribe(client, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "go", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	received := receiveN(consumer, 100, quiet)
	if err := ackAll(consumer, received); err != nil {
		return nil, err
	}
	messages := make([]observed, len(received))
	for i, message := range received {
		messages[i] = observed{
			"value":       string(message.Payload()),
			"key":         message.Key(),
			"properties":  message.Properties(),
			"entry_id":    message.ID().EntryID(),
			"batch_index": message.ID().BatchIdx(),
			"event_time":  message.EventTime().UnixMilli(),
		}
	}
	return observed{"messages": messages}, nil
}
