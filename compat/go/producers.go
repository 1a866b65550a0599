package main

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// producerAccessModes: Shared producers coexist; an Exclusive producer refuses every other producer;
// a WaitForExclusive producer is created only when the exclusive one closes, and then publishes.
func producerAccessModes(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	result := observed{}

	sharedTopic := e.topic("shared")
	var shared []pulsar.Producer
	for i := 0; i < 2; i++ {
		producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: sharedTopic})
		if err != nil {
			return nil, fmt.Errorf("shared producer %d: %w", i, err)
		}
		defer producer.Close()
		shared = append(shared, producer)
	}
	result["shared_producers"] = len(shared)

	exclusiveTopic := e.topic("exclusive")
	exclusive, err := client.CreateProducer(pulsar.ProducerOptions{
		Topic: exclusiveTopic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive,
	})
	if err != nil {
		return nil, fmt.Errorf("exclusive producer: %w", err)
	}
	second, err := client.CreateProducer(pulsar.ProducerOptions{
		Topic: exclusiveTopic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive,
	})
	if err == nil {
		second.Close()
	}
	result["second_exclusive_error"] = errorText(err)
	sharedBeside, err := client.CreateProducer(pulsar.ProducerOptions{Topic: exclusiveTopic})
	if err == nil {
		sharedBeside.Close()
	}
	result["shared_beside_exclusive_error"] = errorText(err)

	// WaitForExclusive: pending while the exclusive producer is there, created once it closes.
	created := make(chan pulsar.Producer, 1)
	failed := make(chan error, 1)
	go func() {
		producer, err := client.CreateProducer(pulsar.ProducerOptions{
			Topic: exclusiveTopic, ProducerAccessMode: pulsar.ProducerAccessModeWaitForExclusive,
		})
		if err != nil {
			failed <- err
			return
		}
		created <- producer
	}()
	select {
	case producer := <-created:
		producer.Close()
		result["waiting_producer_pending_while_exclusive_open"] = false
	case err := <-failed:
		return nil, fmt.Errorf("wait-for-exclusive producer: %w", err)
	case <-time.After(quiet):
		result["waiting_producer_pending_while_exclusive_open"] = true
	}
	exclusive.Close()
	select {
	case producer := <-created:
		defer producer.Close()
		result["waiting_producer_created_after_close"] = true
		id, err := producer.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("from-waiter")})
		if err != nil {
			return nil, fmt.Errorf("send from wait-for-exclusive producer: %w", err)
		}
		reader, err := client.CreateReader(pulsar.ReaderOptions{
			Topic: exclusiveTopic, StartMessageID: id, StartMessageIDInclusive: true,
		})
		if err != nil {
			return nil, err
		}
		defer reader.Close()
		result["waiting_producer_message"] = payloads(readN(reader, 1, expectWait))
	case err := <-failed:
		return nil, fmt.Errorf("wait-for-exclusive producer: %w", err)
	case <-time.After(expectWait):
		result["waiting_producer_created_after_close"] = false
	}
	return result, nil
}

// batchingCompression: a batch of keyed messages with properties, under each compression codec, is
// stored as fewer entries than messages and read back whole and in order.
func batchingCompression(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	codecs := map[string]pulsar.CompressionType{
		"none": pulsar.NoCompression,
		"lz4":  pulsar.LZ4,
		"zlib": pulsar.ZLib,
		"zstd": pulsar.ZSTD,
	}
	const count = 20
	result := observed{}
	for _, name := range sortedKeys(codecs) {
		topic := e.topic("batch-" + name)
		consumer, err := subscribe(client, pulsar.ConsumerOptions{
			Topic: topic, SubscriptionName: "sub", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		})
		if err != nil {
			return nil, err
		}
		producer, err := client.CreateProducer(pulsar.ProducerOptions{
			Topic:                   topic,
			CompressionType:         codecs[name],
			BatchingMaxMessages:     count,
			BatchingMaxPublishDelay: time.Second,
		})
		if err != nil {
			return nil, fmt.Errorf("producer with %s: %w", name, err)
		}
		sent := numbered("batched "+name, count)
		done := make(chan error, count)
		for i, value := range sent {
			producer.SendAsync(context.Background(), &pulsar.ProducerMessage{
				Payload:    []byte(value),
				Key:        fmt.Sprintf("key-%d", i%4),
				Properties: map[string]string{"index": fmt.Sprint(i)},
			}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { done <- err })
		}
		if err := producer.Flush(); err != nil {
			return nil, fmt.Errorf("flush %s: %w", name, err)
		}
		for range sent {
			if err := <-done; err != nil {
				return nil, fmt.Errorf("send with %s: %w", name, err)
			}
		}
		producer.Close()
		received := receiveN(consumer, count, expectWait)
		entries := map[string]bool{}
		keysAndProperties := true
		batchIndexMax := int32(-1)
		for i, message := range received {
			id := message.ID()
			entries[fmt.Sprintf("%d:%d", id.LedgerID(), id.EntryID())] = true
			batchIndexMax = max(batchIndexMax, id.BatchIdx())
			if message.Key() != fmt.Sprintf("key-%d", i%4) || message.Properties()["index"] != fmt.Sprint(i) {
				keysAndProperties = false
			}
		}
		if err := ackAll(consumer, received); err != nil {
			return nil, err
		}
		consumer.Close()
		result[name] = observed{
			"received":            payloads(received),
			"sent":                sent,
			"entries":             len(entries),
			"batch_index_max":     batchIndexMax,
			"keys_and_properties": keysAndProperties,
		}
	}
	return result, nil
}
