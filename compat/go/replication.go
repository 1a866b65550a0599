package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// geoReplicate: a producer in the broker's cluster (r1) sends one message with DisableReplication, one
// with ReplicationClusters [r1], then keyed messages with a property and an event time, to a topic of
// namespace geo/ns, which replicates to r2 (-remote-service-url); a consumer in r2 reports what arrived,
// as the Go client sees a replicated message.
func geoReplicate(e env) (observed, error) {
	if e.remoteServiceURL == "" {
		return nil, fmt.Errorf("geo-replicate needs -remote-service-url")
	}
	const count = 10
	topic := fmt.Sprintf("persistent://geo/ns/%s-geo", e.name)
	local, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer local.Close()
	remote, err := newClient(e.remoteServiceURL)
	if err != nil {
		return nil, err
	}
	defer remote.Close()
	consumer, err := remote.Subscribe(pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "compat", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	producer, err := local.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "go-geo", DisableBatching: true})
	if err != nil {
		return nil, err
	}
	defer producer.Close()
	ctx := context.Background()
	kept := []*pulsar.ProducerMessage{
		{Payload: []byte("not-replicated"), DisableReplication: true},
		{Payload: []byte("r1-only"), ReplicationClusters: []string{"r1"}},
	}
	for _, message := range kept {
		if _, err := producer.Send(ctx, message); err != nil {
			return nil, err
		}
	}
	for i := 0; i < count; i++ {
		_, err := producer.Send(ctx, &pulsar.ProducerMessage{
			Payload:    []byte(fmt.Sprintf("m-%d", i)),
			Key:        fmt.Sprintf("k-%d", i%3),
			Properties: map[string]string{"index": strconv.Itoa(i)},
			EventTime:  time.UnixMilli(int64(1_000 + i)),
		})
		if err != nil {
			return nil, err
		}
	}
	var received []observed
	for _, message := range receiveN(consumer, count, expectWait) {
		received = append(received, observed{
			"value":          string(message.Payload()),
			"key":            message.Key(),
			"properties":     message.Properties(),
			"eventTime":      message.EventTime().UnixMilli(),
			"producerName":   message.ProducerName(),
			"replicated":     message.IsReplicated(),
			"replicatedFrom": message.GetReplicatedFrom(),
		})
		if err := consumer.Ack(message); err != nil {
			return nil, err
		}
	}
	var more []string
	for _, message := range receiveN(consumer, 1, quiet) {
		more = append(more, string(message.Payload()))
	}
	return observed{"received": received, "more": more}, nil
}
