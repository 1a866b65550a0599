package main

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// sendBatch sends values as one batch (async sends, then a flush) and returns their ids in order.
func sendBatch(client pulsar.Client, topic string, values []string) ([]pulsar.MessageID, error) {
	producer, err := client.CreateProducer(pulsar.ProducerOptions{
		Topic: topic, BatchingMaxMessages: uint(len(values)), BatchingMaxPublishDelay: 10 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("create batching producer on %s: %w", topic, err)
	}
	defer producer.Close()
	type sent struct {
		index int
		id    pulsar.MessageID
		err   error
	}
	done := make(chan sent, len(values))
	for i, value := range values {
		producer.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(value)},
			func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { done <- sent{i, id, err} })
	}
	if err := producer.Flush(); err != nil {
		return nil, fmt.Errorf("flush: %w", err)
	}
	ids := make([]pulsar.MessageID, len(values))
	for range values {
		result := <-done
		if result.err != nil {
			return nil, fmt.Errorf("send %s: %w", values[result.index], result.err)
		}
		ids[result.index] = result.id
	}
	return ids, nil
}

// ackList: AckIDList acknowledges a list of messages at once, answered by the broker's receipt
// (AckWithResponse); after a reconnect only the messages left out of the list come again.
func ackList(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	topic := e.topic("ack-list")
	options := pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Exclusive, AckWithResponse: true,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	}
	consumer, err := subscribe(client, options)
	if err != nil {
		return nil, err
	}
	if _, err := produce(client, topic, numbered("m", 10)); err != nil {
		return nil, err
	}
	received := receiveN(consumer, 10, expectWait)
	if len(received) != 10 {
		return nil, fmt.Errorf("received %d of 10 before acking", len(received))
	}
	var listed []pulsar.MessageID
	for i := 0; i < len(received); i += 2 {
		listed = append(listed, received[i].ID())
	}
	result := observed{"ack_list_error": errorText(consumer.AckIDList(listed))}
	consumer.Close()
	again, err := subscribe(client, options)
	if err != nil {
		return nil, err
	}
	defer again.Close()
	result["redelivered"] = payloads(receiveN(again, 10, quiet))
	return result, nil
}

// batchIndexAck: with EnableBatchIndexAcknowledgment, acking part of a batch acknowledges those
// indexes only: after a reconnect, and after a redelivery of the unacked messages, the rest of the
// batch comes again and the acked indexes do not.
func batchIndexAck(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	topic := e.topic("batch-index-ack")
	options := pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared, AckWithResponse: true,
		EnableBatchIndexAcknowledgment: true, NackRedeliveryDelay: 100 * time.Millisecond,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	}
	consumer, err := subscribe(client, options)
	if err != nil {
		return nil, err
	}
	if _, err := sendBatch(client, topic, numbered("m", 10)); err != nil {
		return nil, err
	}
	received := receiveN(consumer, 10, expectWait)
	entries := map[string]bool{}
	for _, message := range received {
		entries[fmt.Sprintf("%d:%d", message.ID().LedgerID(), message.ID().EntryID())] = true
	}
	result := observed{"first": payloads(received), "entries": len(entries)}
	for i := 0; i < len(received); i += 2 {
		if err := consumer.Ack(received[i]); err != nil {
			return nil, fmt.Errorf("ack %s: %w", received[i].Payload(), err)
		}
	}
	consumer.Close()
	again, err := subscribe(client, options)
	if err != nil {
		return nil, err
	}
	defer again.Close()
	afterReconnect := receiveN(again, 10, quiet)
	result["after_reconnect"] = payloads(afterReconnect)
	// Ack one more index, then ask for the unacked rest again without reconnecting.
	if len(afterReconnect) > 0 {
		if err := again.Ack(afterReconnect[0]); err != nil {
			return nil, err
		}
	}
	for _, message := range afterReconnect[min(1, len(afterReconnect)):] {
		again.Nack(message)
	}
	result["after_redelivery"] = payloads(receiveN(again, 10, quiet))
	return result, nil
}

// retryTopic: with RetryEnable, ReconsumeLater sends the message to the retry topic
// ({topic}-{subscription}-RETRY) with RECONSUMETIMES raised each time; past MaxDeliveries it goes to
// the dead letter topic ({topic}-{subscription}-DLQ) instead.
func retryTopic(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	topic := e.topic("retried")
	consumer, err := subscribe(client, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared, RetryEnable: true,
		DLQ:                         &pulsar.DLQPolicy{MaxDeliveries: 2},
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	if _, err := produce(client, topic, []string{"again"}); err != nil {
		return nil, err
	}
	var deliveries []observed
	for {
		messages := receiveN(consumer, 1, quiet)
		if len(messages) == 0 {
			break
		}
		message := messages[0]
		deliveries = append(deliveries, observed{
			"payload":         string(message.Payload()),
			"topic":           message.Topic(),
			"reconsume_times": message.Properties()["RECONSUMETIMES"],
		})
		consumer.ReconsumeLater(message, 0)
	}
	deadLetterTopic := topic + "-sub-DLQ"
	reader, err := client.CreateReader(pulsar.ReaderOptions{Topic: deadLetterTopic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		return nil, err
	}
	defer reader.Close()
	dead := readN(reader, 2, quiet)
	properties := map[string]string{}
	if len(dead) > 0 {
		properties = dead[0].Properties()
	}
	return observed{
		"topic":                  topic,
		"deliveries":             deliveries,
		"dead_letters":           payloads(dead),
		"dead_letter_properties": properties,
	}, nil
}

// patternSubscription: a TopicsPattern consumer receives from the topics that match when it
// subscribes and, after its discovery period, from a matching topic created later; never from a
// topic that does not match.
func patternSubscription(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	for _, suffix := range []string{"pat-a", "pat-b", "other"} {
		if _, err := produce(client, e.topic(suffix), []string{suffix + "-before"}); err != nil {
			return nil, err
		}
	}
	consumer, err := subscribe(client, pulsar.ConsumerOptions{
		TopicsPattern: fmt.Sprintf("persistent://public/default/%s-pat-.*", e.name), SubscriptionName: "sub",
		AutoDiscoveryPeriod: 500 * time.Millisecond, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	before := receiveN(consumer, 10, quiet)
	if err := ackAll(consumer, before); err != nil {
		return nil, err
	}
	for _, suffix := range []string{"pat-c", "other"} {
		if _, err := produce(client, e.topic(suffix), []string{suffix + "-after"}); err != nil {
			return nil, err
		}
	}
	after := receiveN(consumer, 1, expectWait)
	after = append(after, receiveN(consumer, 10, quiet)...)
	return observed{"before": sorted(payloads(before)), "after": sorted(payloads(after))}, nil
}
