package main

import (
	"context"
	"fmt"
	"sort"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// partitioned: a topic created with 3 partitions through pulsaradmin takes keyed messages on every
// partition and gives them all back to one consumer; growing it to 4 partitions is seen by the admin
// client and by a new client.
func partitioned(e env) (observed, error) {
	admin, err := newAdmin(e)
	if err != nil {
		return nil, err
	}
	topic := e.topic("partitioned")
	name, err := utils.GetTopicName(topic)
	if err != nil {
		return nil, err
	}
	result := observed{}
	if err := admin.Topics().Create(*name, 3); err != nil {
		return nil, fmt.Errorf("create partitioned topic: %w", err)
	}
	metadata, err := admin.Topics().GetMetadata(*name)
	if err != nil {
		return nil, err
	}
	result["partitions_after_create"] = metadata.Partitions

	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
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
	const count = 30
	for i := 0; i < count; i++ {
		message := &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%d", i)), Key: fmt.Sprintf("key-%d", i)}
		if _, err := producer.Send(context.Background(), message); err != nil {
			return nil, err
		}
	}
	producer.Close()
	received := receiveN(consumer, count, expectWait)
	if err := ackAll(consumer, received); err != nil {
		return nil, err
	}
	partitionsSeen := map[string]int{}
	for _, message := range received {
		partitionsSeen[message.Topic()]++
	}
	values := payloads(received)
	sort.Strings(values)
	result["received_sorted"] = values
	result["messages_per_partition"] = partitionsSeen

	if err := admin.Topics().Update(*name, 4); err != nil {
		return nil, fmt.Errorf("update partitioned topic: %w", err)
	}
	metadata, err = admin.Topics().GetMetadata(*name)
	if err != nil {
		return nil, err
	}
	result["partitions_after_update"] = metadata.Partitions
	fresh, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer fresh.Close()
	names, err := fresh.TopicPartitions(topic)
	if err != nil {
		return nil, err
	}
	result["client_partitions_after_update"] = names
	return result, nil
}

// httpLookup: a client whose service URL is the broker's http:// address looks topics up over HTTP
// and then produces and consumes over the binary protocol, on a plain and on a partitioned topic.
func httpLookup(e env) (observed, error) {
	admin, err := newAdmin(e)
	if err != nil {
		return nil, err
	}
	partitionedTopic := e.topic("http-partitioned")
	name, err := utils.GetTopicName(partitionedTopic)
	if err != nil {
		return nil, err
	}
	if err := admin.Topics().Create(*name, 2); err != nil {
		return nil, fmt.Errorf("create partitioned topic: %w", err)
	}
	client, err := newClient(e.adminURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	result := observed{}
	for _, topic := range []string{e.topic("http-plain"), partitionedTopic} {
		consumer, err := subscribe(client, pulsar.ConsumerOptions{
			Topic: topic, SubscriptionName: "sub", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		})
		if err != nil {
			return nil, err
		}
		if _, err := produce(client, topic, numbered("m", 4)); err != nil {
			return nil, err
		}
		received := receiveN(consumer, 4, expectWait)
		if err := ackAll(consumer, received); err != nil {
			return nil, err
		}
		consumer.Close()
		values := payloads(received)
		sort.Strings(values)
		partitions, err := client.TopicPartitions(topic)
		if err != nil {
			return nil, err
		}
		result[topic] = observed{"received_sorted": values, "partitions": partitions}
	}
	return result, nil
}
