package main

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// subscriptionTypes: Exclusive refuses a second consumer; Failover gives everything to one consumer;
// Shared spreads messages over both; Key_Shared gives each key to exactly one consumer, in order.
func subscriptionTypes(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	result := observed{}

	exclusiveTopic := e.topic("exclusive")
	first, err := subscribe(client, pulsar.ConsumerOptions{Topic: exclusiveTopic, SubscriptionName: "sub", Type: pulsar.Exclusive})
	if err != nil {
		return nil, err
	}
	defer first.Close()
	second, err := client.Subscribe(pulsar.ConsumerOptions{Topic: exclusiveTopic, SubscriptionName: "sub", Type: pulsar.Exclusive})
	if err == nil {
		second.Close()
	}
	result["exclusive_second_consumer_error"] = errorText(err)

	for _, kind := range []struct {
		name string
		kind pulsar.SubscriptionType
	}{{"failover", pulsar.Failover}, {"shared", pulsar.Shared}, {"key_shared", pulsar.KeyShared}} {
		topic := e.topic(kind.name)
		var consumers []pulsar.Consumer
		for i := 0; i < 2; i++ {
			consumer, err := subscribe(client, pulsar.ConsumerOptions{
				Topic: topic, SubscriptionName: "sub", Type: kind.kind, Name: fmt.Sprintf("consumer-%d", i),
				ReceiverQueueSize: 4, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
			})
			if err != nil {
				return nil, err
			}
			defer consumer.Close()
			consumers = append(consumers, consumer)
		}
		producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			return nil, err
		}
		for i := 0; i < 40; i++ {
			message := &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("%02d", i)), Key: fmt.Sprintf("key-%d", i%8)}
			if _, err := producer.Send(context.Background(), message); err != nil {
				return nil, err
			}
		}
		producer.Close()
		per := receiveConcurrently(consumers)
		perConsumer := make([][]string, len(per))
		keyOwners := map[string]map[int]bool{}
		keyPayloads := map[string][]string{}
		for i, messages := range per {
			perConsumer[i] = payloads(messages)
			for _, message := range messages {
				if keyOwners[message.Key()] == nil {
					keyOwners[message.Key()] = map[int]bool{}
				}
				keyOwners[message.Key()][i] = true
				keyPayloads[message.Key()] = append(keyPayloads[message.Key()], string(message.Payload()))
			}
		}
		consumersPerKey := map[string]int{}
		for key, owners := range keyOwners {
			consumersPerKey[key] = len(owners)
		}
		result[kind.name] = observed{
			"per_consumer":      perConsumer,
			"consumers_per_key": consumersPerKey,
			"payloads_per_key":  keyPayloads,
		}
	}
	return result, nil
}

// acks: individually acked messages are not delivered again after a reconnect, unacked ones are; a
// cumulative ack covers everything up to its message.
func acks(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	result := observed{}
	for _, cumulative := range []bool{false, true} {
		name := map[bool]string{false: "individual", true: "cumulative"}[cumulative]
		topic := e.topic(name)
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
			return nil, fmt.Errorf("%s: received %d of 10 before acking", name, len(received))
		}
		if cumulative {
			err = consumer.AckCumulative(received[5])
		} else {
			for i := 0; i < len(received) && err == nil; i += 2 {
				err = consumer.Ack(received[i])
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s ack: %w", name, err)
		}
		consumer.Close()
		again, err := subscribe(client, options)
		if err != nil {
			return nil, err
		}
		result[name+"_redelivered"] = payloads(receiveN(again, 10, quiet))
		again.Close()
	}
	return result, nil
}

// negativeAck: a negatively acknowledged message comes back after the nack delay, with its
// redelivery count raised; the acknowledged ones do not.
func negativeAck(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	topic := e.topic("nack")
	consumer, err := subscribe(client, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared, NackRedeliveryDelay: 200 * time.Millisecond,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	if _, err := produce(client, topic, numbered("m", 3)); err != nil {
		return nil, err
	}
	first := receiveN(consumer, 3, expectWait)
	for _, message := range first {
		if string(message.Payload()) == "m-1" {
			consumer.Nack(message)
		} else if err := consumer.Ack(message); err != nil {
			return nil, err
		}
	}
	redelivered := receiveN(consumer, 3, quiet)
	counts := make([]uint32, len(redelivered))
	for i, message := range redelivered {
		counts[i] = message.RedeliveryCount()
	}
	if err := ackAll(consumer, redelivered); err != nil {
		return nil, err
	}
	return observed{
		"first":                           payloads(first),
		"redelivered":                     payloads(redelivered),
		"redelivery_counts":               counts,
		"first_delivery_redelivery_count": first[0].RedeliveryCount(),
	}, nil
}

// deadLetter: a message negatively acknowledged on each of its MaxDeliveries deliveries goes to the
// dead letter topic, with the properties that say where it came from; other messages do not.
func deadLetter(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	topic := e.topic("work")
	deadLetterTopic := e.topic("work-DLQ")
	consumer, err := subscribe(client, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared, NackRedeliveryDelay: 100 * time.Millisecond,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		DLQ:                         &pulsar.DLQPolicy{MaxDeliveries: 2, DeadLetterTopic: deadLetterTopic},
	})
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	ids, err := produce(client, topic, []string{"poison", "good"})
	if err != nil {
		return nil, err
	}
	deliveries := map[string]int{}
	for {
		messages := receiveN(consumer, 1, quiet)
		if len(messages) == 0 {
			break
		}
		message := messages[0]
		deliveries[string(message.Payload())]++
		if string(message.Payload()) == "poison" {
			consumer.Nack(message)
		} else if err := consumer.Ack(message); err != nil {
			return nil, err
		}
	}
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
		"deliveries":             deliveries,
		"dead_letters":           payloads(dead),
		"dead_letter_properties": properties,
		"poison_message_id":      ids[0].String(),
		"topic":                  topic,
	}, nil
}

// delayedDelivery: a message sent with DeliverAfter reaches a Shared consumer after a message sent
// later without delay, and not before its delivery time.
func delayedDelivery(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	topic := e.topic("delayed")
	consumer, err := subscribe(client, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared,
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
	const delay = 2 * time.Second
	sentAt := time.Now()
	if _, err := producer.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("delayed"), DeliverAfter: delay}); err != nil {
		return nil, err
	}
	if _, err := producer.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("immediate")}); err != nil {
		return nil, err
	}
	var order []string
	arrivedAfterMs := map[string]int64{}
	for range 2 {
		received := receiveN(consumer, 1, delay+expectWait)
		if len(received) == 0 {
			break
		}
		arrivedAfterMs[string(received[0].Payload())] = time.Since(sentAt).Milliseconds()
		order = append(order, string(received[0].Payload()))
		if err := consumer.Ack(received[0]); err != nil {
			return nil, err
		}
	}
	return observed{"order": order, "arrived_after_ms": arrivedAfterMs, "delay_ms": delay.Milliseconds()}, nil
}
