package main

import (
	"os"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"
)

// listenerLookup: a client naming an advertised listener (ClientOptions.ListenerName) is sent to that
// listener's URL; the scenario produces and consumes through it.
func listenerLookup(e env) (observed, error) {
	logger := logrus.New()
	logger.SetOutput(os.Stderr)
	logger.SetLevel(logrus.WarnLevel)
	client, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               e.serviceURL,
		ListenerName:      e.listenerName,
		OperationTimeout:  3 * time.Second,
		ConnectionTimeout: 3 * time.Second,
		Logger:            pulsarlog.NewLoggerWithLogrus(logger),
	})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	topic := e.topic("listener")
	consumer, err := client.Subscribe(pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		return observed{"subscribe_error": err.Error()}, nil
	}
	defer consumer.Close()
	if _, err := produce(client, topic, numbered("m", 3)); err != nil {
		return nil, err
	}
	return observed{"received": payloads(receiveN(consumer, 3, expectWait))}, nil
}
