package main

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// keyed is one message to send: a key (empty: none) and a value (nil: a tombstone, an empty payload,
// which is how this client deletes a key; it has no null_value).
type keyed struct {
	key   string
	value *string
}

func kv(key, value string) keyed { return keyed{key, &value} }

// Sent before compaction: k0..k4, k0 and k2 again, an unkeyed message, a tombstone of k1; after it, k0
// again and a tombstone of k4 (the same as compat/java Compaction.BEFORE and AFTER).
var (
	beforeCompaction = []keyed{
		kv("k0", "k0-v1"), kv("k1", "k1-v1"), kv("k2", "k2-v1"), kv("k3", "k3-v1"), kv("k4", "k4-v1"),
		kv("k0", "k0-v2"), kv("", "no-key"), kv("k2", "k2-v2"), {"k1", nil},
	}
	afterCompaction = []keyed{kv("k0", "k0-v3"), {"k4", nil}}
)

// compactionPoll is how often the compaction status is asked; compactionWait bounds the wait.
const (
	compactionPoll = 50 * time.Millisecond
	compactionWait = 15 * time.Second
)

// produceKeyed sends the messages in order, one batch when batched, else one entry each.
func produceKeyed(client pulsar.Client, topic string, batched bool, messages []keyed) error {
	return produceKeyedWith(client, pulsar.ProducerOptions{Topic: topic}, batched, messages)
}

// produceKeyedWith is produceKeyed with the producer's other options (a schema).
func produceKeyedWith(client pulsar.Client, options pulsar.ProducerOptions, batched bool, messages []keyed) error {
	topic := options.Topic
	options.DisableBatching = !batched
	options.BatchingMaxMessages = 1000
	options.BatchingMaxPublishDelay = time.Minute
	producer, err := client.CreateProducer(options)
	if err != nil {
		return fmt.Errorf("create producer on %s: %w", topic, err)
	}
	defer producer.Close()
	errs := make(chan error, len(messages))
	for _, m := range messages {
		message := &pulsar.ProducerMessage{Key: m.key}
		if m.value != nil {
			message.Payload = []byte(*m.value)
		}
		if !batched {
			if _, err := producer.Send(context.Background(), message); err != nil {
				return fmt.Errorf("send %v: %w", m, err)
			}
			continue
		}
		producer.SendAsync(context.Background(), message, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			errs <- err
		})
	}
	if !batched {
		return nil
	}
	if err := producer.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	for range messages {
		if err := <-errs; err != nil {
			return fmt.Errorf("send: %w", err)
		}
	}
	return nil
}

// pairs describes messages as [key, value], value nil for an empty payload (a tombstone).
func pairs(messages []pulsar.Message) [][]any {
	seen := make([][]any, len(messages))
	for i, message := range messages {
		var value any
		if len(message.Payload()) > 0 {
			value = string(message.Payload())
		}
		seen[i] = []any{message.Key(), value}
	}
	return seen
}

// readAvailable reads while HasNext says there is more.
func readAvailable(reader pulsar.Reader) []pulsar.Message {
	var read []pulsar.Message
	for reader.HasNext() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		message, err := reader.Next(ctx)
		cancel()
		if err != nil {
			break
		}
		read = append(read, message)
	}
	return read
}

func compactionStatus(admin pulsaradmin.Client, topic utils.TopicName) string {
	status, err := admin.Topics().CompactStatus(topic)
	if err != nil {
		return "ERROR " + err.Error()
	}
	if status.LastError != "" {
		return string(status.Status) + ": " + status.LastError
	}
	return string(status.Status)
}

// awaitCompaction polls the status until it is neither NOT_RUN (not started yet) nor RUNNING.
func awaitCompaction(admin pulsaradmin.Client, topic utils.TopicName) string {
	deadline := time.Now().Add(compactionWait)
	status := compactionStatus(admin, topic)
	for (status == string(utils.NOTRUN) || status == string(utils.RUNNING)) && time.Now().Before(deadline) {
		time.Sleep(compactionPoll)
		status = compactionStatus(admin, topic)
	}
	return status
}

// compactionRead: compaction triggered with pulsaradmin; a compacted reader and a compacted consumer
// read each key's latest value up to the horizon, then every message after it; plain and batched topics.
func compactionRead(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	admin, err := newAdmin(e)
	if err != nil {
		return nil, err
	}
	result := observed{}
	for _, batched := range []bool{false, true} {
		topic := e.topic(fmt.Sprintf("compacted-%v", batched))
		name, err := topicName(topic)
		if err != nil {
			return nil, err
		}
		seen := observed{}
		if err := produceKeyed(client, topic, batched, beforeCompaction); err != nil {
			return nil, err
		}
		seen["status_before"] = compactionStatus(admin, name)
		if err := admin.Topics().Compact(name); err != nil {
			return nil, fmt.Errorf("compact: %w", err)
		}
		seen["status"] = awaitCompaction(admin, name)
		if err := produceKeyed(client, topic, batched, afterCompaction); err != nil {
			return nil, err
		}
		reader, err := client.CreateReader(pulsar.ReaderOptions{
			Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReadCompacted: true,
		})
		if err != nil {
			return nil, fmt.Errorf("compacted reader: %w", err)
		}
		seen["compacted_reader"] = pairs(readAvailable(reader))
		reader.Close()
		consumer, err := subscribe(client, pulsar.ConsumerOptions{
			Topic: topic, SubscriptionName: "compacted", Type: pulsar.Exclusive, ReadCompacted: true,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		})
		if err != nil {
			return nil, err
		}
		received := receiveN(consumer, 100, quiet)
		if err := ackAll(consumer, received); err != nil {
			return nil, err
		}
		consumer.Close()
		seen["compacted_consumer"] = pairs(received)
		plain, err := client.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
		if err != nil {
			return nil, err
		}
		seen["plain_reader"] = pairs(readAvailable(plain))
		plain.Close()
		result[fmt.Sprintf("batched_%v", batched)] = seen
	}
	return result, nil
}

// compactionTableView: a TableView of a compacted topic, its values, tombstones, and its listener.
func compactionTableView(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	admin, err := newAdmin(e)
	if err != nil {
		return nil, err
	}
	topic := e.topic("table")
	name, err := topicName(topic)
	if err != nil {
		return nil, err
	}
	// A STRING schema: this client's TableView needs a schema, and one that is not BYTES, which it
	// sends as a schema of type None that the broker refuses on a topic without a schema.
	options := pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewStringSchema(nil)}
	if err := produceKeyedWith(client, options, true, beforeCompaction); err != nil {
		return nil, err
	}
	if err := admin.Topics().Compact(name); err != nil {
		return nil, fmt.Errorf("compact: %w", err)
	}
	result := observed{"status": awaitCompaction(admin, name)}
	view, err := client.CreateTableView(pulsar.TableViewOptions{
		Topic: topic, Schema: pulsar.NewStringSchema(nil), SchemaValueType: reflect.TypeOf((*string)(nil)),
	})
	if err != nil {
		return nil, fmt.Errorf("table view: %w", err)
	}
	defer view.Close()
	snapshot := func() map[string]string {
		values := map[string]string{}
		for key, value := range view.Entries() {
			values[key] = *value.(*string)
		}
		return values
	}
	result["initial"] = snapshot()
	result["contains_k1"] = view.ContainsKey("k1")
	updates := make(chan []any, 16)
	err = view.ForEachAndListen(func(key string, value any) error {
		var text any
		if payload, ok := value.(*string); ok && payload != nil {
			text = *payload
		}
		updates <- []any{key, text}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// ForEachAndListen first walks what is there (in map order), then reports what comes.
	existing := len(result["initial"].(map[string]string))
	for range existing {
		<-updates
	}
	// Batched: this client drops a message that is not in a batch and has neither payload nor properties.
	updated := []keyed{kv("k5", "k5-v1"), {"k0", nil}, kv("k3", "k3-v2")}
	if err := produceKeyedWith(client, options, true, updated); err != nil {
		return nil, err
	}
	var heard [][]any
	timeout := time.After(expectWait)
	for len(heard) < 3 {
		select {
		case update := <-updates:
			heard = append(heard, update)
		case <-timeout:
			result["updates"] = heard
			result["after"] = snapshot()
			return result, nil
		}
	}
	result["updates"] = heard
	result["after"] = snapshot()
	return result, nil
}

// compactionThreshold: a topic's threshold (Topics().SetCompactionThreshold) and a namespace's
// (Namespaces().SetCompactionThreshold) make the broker compact on its own.
func compactionThreshold(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	admin, err := newAdmin(e)
	if err != nil {
		return nil, err
	}
	result := observed{}
	namespace := "public/" + e.name
	if err := admin.Namespaces().CreateNamespace(namespace); err != nil {
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	for _, level := range []string{"topic", "namespace"} {
		topic := e.topic("threshold")
		if level == "namespace" {
			topic = fmt.Sprintf("persistent://%s/threshold", namespace)
		}
		name, err := topicName(topic)
		if err != nil {
			return nil, err
		}
		if err := produceKeyed(client, topic, false, beforeCompaction); err != nil {
			return nil, err
		}
		seen := observed{"status_before": compactionStatus(admin, name)}
		if level == "topic" {
			if err := admin.Topics().SetCompactionThreshold(name, 10); err != nil {
				return nil, fmt.Errorf("topic threshold: %w", err)
			}
			seen["threshold"], err = admin.Topics().GetCompactionThreshold(name, false)
		} else {
			ns, nsErr := utils.GetNamespaceName(namespace)
			if nsErr != nil {
				return nil, nsErr
			}
			if err := admin.Namespaces().SetCompactionThreshold(*ns, 10); err != nil {
				return nil, fmt.Errorf("namespace threshold: %w", err)
			}
			seen["threshold"], err = admin.Namespaces().GetCompactionThreshold(*ns)
		}
		if err != nil {
			return nil, fmt.Errorf("get threshold: %w", err)
		}
		seen["status"] = awaitCompaction(admin, name)
		reader, err := client.CreateReader(pulsar.ReaderOptions{
			Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReadCompacted: true,
		})
		if err != nil {
			return nil, err
		}
		seen["compacted_reader"] = pairs(readAvailable(reader))
		reader.Close()
		result[level] = seen
	}
	return result, nil
}
