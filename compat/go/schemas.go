package main

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// The record the schema scenarios write, in three versions: v2 adds a field with a default (null),
// v3 makes `age` a string, which neither v1 nor v2 data can be read as.
const (
	userV1 = `{"type":"record","name":"User","namespace":"compat","fields":[` +
		`{"name":"name","type":["null","string"],"default":null},` +
		`{"name":"age","type":["null","int"],"default":null}]}`
	userV2 = `{"type":"record","name":"User","namespace":"compat","fields":[` +
		`{"name":"name","type":["null","string"],"default":null},` +
		`{"name":"age","type":["null","int"],"default":null},` +
		`{"name":"email","type":["null","string"],"default":null}]}`
	userV3 = `{"type":"record","name":"User","namespace":"compat","fields":[` +
		`{"name":"name","type":["null","string"],"default":null},` +
		`{"name":"age","type":["null","string"],"default":null}]}`
)

type user struct {
	Name *string `avro:"name" json:"name"`
	Age  *int32  `avro:"age" json:"age"`
}

type userWithEmail struct {
	Name  *string `avro:"name" json:"name"`
	Age   *int32  `avro:"age" json:"age"`
	Email *string `avro:"email" json:"email"`
}

type userWithTextAge struct {
	Name *string `avro:"name" json:"name"`
	Age  *string `avro:"age" json:"age"`
}

func ptr[T any](value T) *T {
	return &value
}

func schemaOf(kind, definition string) (pulsar.Schema, error) {
	switch kind {
	case "avro":
		return pulsar.NewAvroSchemaWithValidation(definition, nil)
	case "json":
		return pulsar.NewJSONSchemaWithValidation(definition, nil)
	}
	return nil, fmt.Errorf("schema kind %s", kind)
}

// schemaVersion is a message's LongSchemaVersion as a number, -1 for none.
func schemaVersion(message pulsar.Message) int64 {
	version := message.SchemaVersion()
	if len(version) != 8 {
		return -1
	}
	return int64(binary.BigEndian.Uint64(version))
}

// decoded is what a message's value decoded to (or the error), with its schema version.
func decoded(message pulsar.Message, value any) observed {
	seen := observed{"version": schemaVersion(message)}
	if err := message.GetSchemaValue(value); err != nil {
		seen["error"] = err.Error()
		return seen
	}
	seen["value"] = value
	return seen
}

func schemaConsumer(client pulsar.Client, topic, subscription string, schema pulsar.Schema) (pulsar.Consumer, error) {
	return client.Subscribe(pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: subscription, Schema: schema,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
}

// schemaJSON and schemaAvro: a producer and a consumer of one schema. The producer's first send asks
// for its schema's version with GET_OR_CREATE_SCHEMA.
func schemaJSON(e env) (observed, error) { return schemaProduceConsume(e, "json", e.topic("json")) }
func schemaAvro(e env) (observed, error) { return schemaProduceConsume(e, "avro", e.topic("avro")) }

// schemaAvroPartitioned: the same on a partitioned topic of two partitions, created by pulsaradmin;
// GET_OR_CREATE_SCHEMA names a partition.
func schemaAvroPartitioned(e env) (observed, error) {
	admin, err := newAdmin(e)
	if err != nil {
		return nil, err
	}
	topic := e.topic("partitioned")
	name, err := topicName(topic)
	if err != nil {
		return nil, err
	}
	if err := admin.Topics().Create(name, 2); err != nil {
		return nil, fmt.Errorf("create partitioned topic: %w", err)
	}
	return schemaProduceConsume(e, "avro", topic)
}

// schemaAvroNonPersistent: the same on a non-persistent topic.
func schemaAvroNonPersistent(e env) (observed, error) {
	return schemaProduceConsume(e, "avro", fmt.Sprintf("non-persistent://public/default/%s-avro", e.name))
}

func schemaProduceConsume(e env, kind, topic string) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	schema, err := schemaOf(kind, userV1)
	if err != nil {
		return nil, err
	}
	consumer, err := schemaConsumer(client, topic, "sub", schema)
	if err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	defer consumer.Close()
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: schema})
	if err != nil {
		return nil, fmt.Errorf("create producer: %w", err)
	}
	defer producer.Close()
	for i := 0; i < 3; i++ {
		value := user{Name: ptr(fmt.Sprintf("user-%d", i)), Age: ptr(int32(20 + i))}
		if _, err := producer.Send(context.Background(), &pulsar.ProducerMessage{Value: &value}); err != nil {
			return nil, fmt.Errorf("send %d: %w", i, err)
		}
	}
	var received []observed
	for _, message := range receiveN(consumer, 3, expectWait) {
		received = append(received, decoded(message, &user{}))
	}
	return observed{"received": received}, nil
}

// schemaEvolution: a v1 producer sends a v1 user, then a v2 user with the message's own schema (its
// version asked for with GET_OR_CREATE_SCHEMA), then a v3 user, which the broker must refuse. A v2
// consumer and a v1 consumer read both messages, each decoded with the schema it was written with.
func schemaEvolution(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	v1, err := schemaOf("avro", userV1)
	if err != nil {
		return nil, err
	}
	v2, err := schemaOf("avro", userV2)
	if err != nil {
		return nil, err
	}
	v3, err := schemaOf("avro", userV3)
	if err != nil {
		return nil, err
	}
	topic := e.topic("evolution")
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: v1})
	if err != nil {
		return nil, fmt.Errorf("create producer: %w", err)
	}
	defer producer.Close()
	ctx := context.Background()
	if _, err := producer.Send(ctx, &pulsar.ProducerMessage{Value: &user{Name: ptr("ada"), Age: ptr(int32(36))}}); err != nil {
		return nil, fmt.Errorf("send v1: %w", err)
	}
	second := userWithEmail{Name: ptr("grace"), Age: ptr(int32(45)), Email: ptr("grace@example.com")}
	if _, err := producer.Send(ctx, &pulsar.ProducerMessage{Value: &second, Schema: v2}); err != nil {
		return nil, fmt.Errorf("send v2: %w", err)
	}
	result := observed{}
	_, err = producer.Send(ctx, &pulsar.ProducerMessage{Value: &userWithTextAge{Name: ptr("x"), Age: ptr("old")}, Schema: v3})
	result["v3_send_error"] = errorText(err)

	consumer, err := schemaConsumer(client, topic, "v2", v2)
	if err != nil {
		return nil, fmt.Errorf("subscribe v2: %w", err)
	}
	defer consumer.Close()
	var read []observed
	for _, message := range receiveN(consumer, 2, expectWait) {
		read = append(read, decoded(message, &userWithEmail{}))
	}
	result["v2_consumer"] = read
	more := receiveN(consumer, 1, quiet)
	result["v2_consumer_more"] = len(more)

	old, err := schemaConsumer(client, topic, "v1", v1)
	if err != nil {
		return nil, fmt.Errorf("subscribe v1: %w", err)
	}
	defer old.Close()
	read = nil
	for _, message := range receiveN(old, 2, expectWait) {
		read = append(read, decoded(message, &user{}))
	}
	result["v1_consumer"] = read

	incompatible, err := schemaConsumer(client, topic, "v3", v3)
	if err == nil {
		incompatible.Close()
	}
	result["v3_subscribe_error"] = errorText(err)
	incompatibleProducer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: v3})
	if err == nil {
		incompatibleProducer.Close()
	}
	result["v3_producer_error"] = errorText(err)
	return result, nil
}

// schemaReadPython: a consumer of each kind reads the users the Python client wrote to
// `{name}-python-json` and `{name}-python-avro` (three each).
func schemaReadPython(e env) (observed, error) {
	client, err := newClient(e.serviceURL)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	result := observed{}
	for _, kind := range []string{"json", "avro"} {
		schema, err := schemaOf(kind, userV1)
		if err != nil {
			return nil, err
		}
		consumer, err := schemaConsumer(client, e.topic("python-"+kind), "go", schema)
		if err != nil {
			return nil, fmt.Errorf("subscribe %s: %w", kind, err)
		}
		var read []observed
		for _, message := range receiveN(consumer, 3, expectWait) {
			read = append(read, decoded(message, &user{}))
		}
		consumer.Close()
		result[kind] = read
	}
	return result, nil
}

// schemaAdmin: pulsaradmin's Schemas(): create, get (newest, by version, all), the version of a
// definition, a compatibility test, delete.
func schemaAdmin(e env) (observed, error) {
	admin, err := newAdmin(e)
	if err != nil {
		return nil, err
	}
	topic := e.topic("admin")
	name, err := topicName(topic)
	if err != nil {
		return nil, err
	}
	if err := admin.Topics().Create(name, 0); err != nil {
		return nil, fmt.Errorf("create topic: %w", err)
	}
	schemas := admin.Schemas()
	result := observed{}
	_, err = schemas.GetSchemaInfo(topic)
	result["missing_status"] = statusOf(err)
	payload := func(definition string) utils.PostSchemaPayload {
		return utils.PostSchemaPayload{SchemaType: "AVRO", Schema: definition, Properties: map[string]string{"owner": "go"}}
	}
	result["create_error"] = errorText(schemas.CreateSchemaByPayload(topic, payload(userV1)))
	info, err := schemas.GetSchemaInfo(topic)
	if err != nil {
		return nil, fmt.Errorf("get schema: %w", err)
	}
	result["get"] = observed{"type": info.Type, "schema": string(info.Schema), "properties": info.Properties}
	withVersion, err := schemas.GetSchemaInfoWithVersion(topic)
	if err != nil {
		return nil, fmt.Errorf("get schema with version: %w", err)
	}
	result["get_version"] = withVersion.Version
	compatible, err := schemas.TestCompatibilityWithPostSchemaPayload(topic, payload(userV2))
	if err != nil {
		return nil, fmt.Errorf("test compatibility v2: %w", err)
	}
	result["compatible_v2"] = compatible.IsCompatibility
	result["strategy"] = compatible.SchemaCompatibilityStrategy
	compatible, err = schemas.TestCompatibilityWithPostSchemaPayload(topic, payload(userV3))
	if err != nil {
		result["compatible_v3"] = errorText(err)
	} else {
		result["compatible_v3"] = compatible.IsCompatibility
	}
	result["create_v2_error"] = errorText(schemas.CreateSchemaByPayload(topic, payload(userV2)))
	err = schemas.CreateSchemaByPayload(topic, payload(userV3))
	result["create_v3_status"] = statusOf(err)
	all, err := schemas.GetAllSchemas(topic)
	if err != nil {
		return nil, fmt.Errorf("get all schemas: %w", err)
	}
	var versions []int64
	for _, schema := range all {
		versions = append(versions, schema.Version)
	}
	result["all_versions"] = versions
	first, err := schemas.GetSchemaInfoByVersion(topic, 0)
	if err != nil {
		return nil, fmt.Errorf("get schema version 0: %w", err)
	}
	result["version_0"] = string(first.Schema)
	version, err := schemas.GetVersionByPayload(topic, payload(userV2))
	result["version_of_v2"] = version
	result["version_of_v2_error"] = errorText(err)
	result["delete_error"] = errorText(schemas.DeleteSchema(topic))
	_, err = schemas.GetSchemaInfo(topic)
	result["after_delete_status"] = statusOf(err)
	return result, nil
}
