package dev.magnetar.compat;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.schema.Field;
import org.apache.pulsar.client.api.schema.GenericRecord;
import org.apache.pulsar.common.schema.KeyValue;
import org.apache.pulsar.common.schema.KeyValueEncodingType;
import org.apache.pulsar.common.policies.data.SchemaCompatibilityStrategy;
import org.apache.pulsar.common.protocol.schema.PostSchemaPayload;
import org.apache.pulsar.common.schema.SchemaInfo;
import org.apache.pulsar.common.schema.SchemaType;

/**
 * Schemas: JSON and AVRO POJOs, evolution, incompatible schemas and the namespace's strategy,
 * AUTO_CONSUME and AUTO_PRODUCE_BYTES, records shared with the Python client, and the schema admin API.
 * Versions are reported as numbers (Pulsar's LongSchemaVersion: 8 bytes, big-endian).
 */
final class Schemas {
    private Schemas() {
    }

    static void register(Map<String, Compat.Scenario> scenarios) {
        scenarios.put("schema_produce_consume", Schemas::produceConsume);
        scenarios.put("schema_evolution", Schemas::evolution);
        scenarios.put("schema_incompatible", Schemas::incompatible);
        scenarios.put("schema_auto", Schemas::auto);
        scenarios.put("schema_consume_users", Schemas::consumeUsers);
        scenarios.put("schema_auto_consume", Schemas::autoConsume);
        scenarios.put("schema_produce_users", Schemas::produceUsers);
        scenarios.put("schema_admin", Schemas::admin);
        scenarios.put("schema_policies", Schemas::policies);
        scenarios.put("schema_key_value", Schemas::keyValue);
        scenarios.put("schema_multi", Schemas::multi);
    }

    /** The first version of the record every scenario writes; Avro's record name is the class's, "User". */
    static final class V1 {
        public static final class User {
            public String name;
            public Integer age;

            public User() {
            }

            User(String name, Integer age) {
                this.name = name;
                this.age = age;
            }
        }
    }

    /** V1 with a field added; nullable, so its default is null (the Java client's AVRO schemas allow null). */
    static final class V2 {
        public static final class User {
            public String name;
            public Integer age;
            public String email;

            public User() {
            }

            User(String name, Integer age, String email) {
                this.name = name;
                this.age = age;
                this.email = email;
            }
        }
    }

    /** V1 with `age` a string: data written with either cannot be read with the other. */
    static final class V3 {
        public static final class User {
            public String name;
            public String age;

            public User() {
            }

            User(String name, String age) {
                this.name = name;
                this.age = age;
            }
        }
    }

    private static <T> Schema<T> schema(String type, Class<T> pojo) {
        return switch (type) {
            case "AVRO" -> Schema.AVRO(pojo);
            case "JSON" -> Schema.JSON(pojo);
            default -> throw new IllegalArgumentException("schema type " + type);
        };
    }

    static long version(byte[] version) {
        return version == null || version.length != 8 ? -1 : ByteBuffer.wrap(version).getLong();
    }

    private static <T> Consumer<T> subscribe(PulsarClient client, Schema<T> schema, String topic, String subscription)
            throws Exception {
        return client.newConsumer(schema).topic(topic).subscriptionName(subscription)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
    }

    private static <T> List<Message<T>> receive(Consumer<T> consumer, int count) throws Exception {
        List<Message<T>> received = new ArrayList<>();
        while (received.size() < count) {
            Message<T> message = consumer.receive(5, TimeUnit.SECONDS);
            if (message == null) {
                break;
            }
            consumer.acknowledge(message);
            received.add(message);
        }
        return received;
    }

    private static Map<String, Object> v1(Message<V1.User> message) {
        Map<String, Object> seen = new LinkedHashMap<>();
        seen.put("name", message.getValue().name);
        seen.put("age", message.getValue().age);
        seen.put("version", version(message.getSchemaVersion()));
        return seen;
    }

    private static Map<String, Object> v2(Message<V2.User> message) {
        Map<String, Object> seen = v1Fields(message.getValue().name, message.getValue().age);
        seen.put("email", message.getValue().email);
        seen.put("version", version(message.getSchemaVersion()));
        return seen;
    }

    private static Map<String, Object> v1Fields(String name, Object age) {
        Map<String, Object> seen = new LinkedHashMap<>();
        seen.put("name", name);
        seen.put("age", age);
        return seen;
    }

    private static String outcome(Callable<Object> call) {
        try {
            call.call();
            return "ok";
        } catch (Exception e) {
            return Util.errorClass(e);
        }
    }

    /** A namespace of the scenario's own, so that a strategy it sets changes no other test's topics. */
    private static String ownNamespace(PulsarAdmin admin, Args args) throws Exception {
        String namespace = "public/" + args.str("namespace");
        admin.namespaces().createNamespace(namespace);
        return namespace;
    }

    /** A producer and a consumer of the same POJO schema (JSON or AVRO). */
    private static Map<String, Object> produceConsume(Args args) throws Exception {
        String type = args.str("type");
        Map<String, Object> seen = new LinkedHashMap<>();
        int partitions = args.integer("partitions", 0);
        if (partitions > 0) {
            try (PulsarAdmin admin = args.admin()) {
                admin.topics().createPartitionedTopic(args.topic(), partitions);
            }
        }
        try (PulsarClient client = args.client();
                Consumer<V1.User> consumer = subscribe(client, schema(type, V1.User.class), args.topic(), "sub");
                Consumer<GenericRecord> auto = subscribe(client, Schema.AUTO_CONSUME(), args.topic(), "auto");
                Producer<V1.User> producer = client.newProducer(schema(type, V1.User.class)).topic(args.topic())
                        .create()) {
            for (int i = 0; i < 3; i++) {
                producer.send(new V1.User("user-" + i, 20 + i));
            }
            producer.newMessage().value(new V1.User(null, null)).send();
            seen.put("received", receive(consumer, 4).stream().map(Schemas::v1).toList());
            seen.put("autoConsumed", records(receive(auto, 4)));
        }
        try (PulsarAdmin admin = args.admin()) {
            SchemaInfo info = admin.schemas().getSchemaInfo(args.topic());
            seen.put("registeredType", info.getType().name());
            seen.put("registeredDefinition", new String(info.getSchema(), StandardCharsets.UTF_8));
        }
        return seen;
    }

    /**
     * v1, then v2 (a field added, with a default) under the default strategy: each producer's messages
     * carry its version; a v2 consumer reads both (v1's with the default), a v1 consumer reads both.
     */
    private static Map<String, Object> evolution(Args args) throws Exception {
        String type = args.str("type");
        String topic = args.topic();
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient client = args.client()) {
            try (Producer<V1.User> first = client.newProducer(schema(type, V1.User.class)).topic(topic).create()) {
                first.send(new V1.User("ada", 36));
            }
            try (Producer<V2.User> second = client.newProducer(schema(type, V2.User.class)).topic(topic).create()) {
                second.send(new V2.User("grace", 45, "grace@example.com"));
            }
            try (Consumer<V2.User> consumer = subscribe(client, schema(type, V2.User.class), topic, "v2")) {
                seen.put("v2Consumer", receive(consumer, 2).stream().map(Schemas::v2).toList());
            }
            try (Consumer<GenericRecord> consumer = subscribe(client, Schema.AUTO_CONSUME(), topic, "auto")) {
                seen.put("autoConsumer", records(receive(consumer, 2)));
            }
            seen.put("v1ConsumerSubscribe", outcome(() -> {
                try (Consumer<V1.User> consumer = subscribe(client, schema(type, V1.User.class), topic, "v1")) {
                    seen.put("v1Consumer", receive(consumer, 2).stream().map(Schemas::v1).toList());
                }
                return null;
            }));
        }
        return seen;
    }

    /**
     * An incompatible producer and consumer refused under the default strategy; accepted once the
     * namespace's strategy is ALWAYS_COMPATIBLE.
     */
    private static Map<String, Object> incompatible(Args args) throws Exception {
        String type = args.str("type");
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarAdmin admin = args.admin(); PulsarClient client = args.client()) {
            String namespace = ownNamespace(admin, args);
            String topic = "persistent://" + namespace + "/users";
            seen.put("strategy", String.valueOf(admin.namespaces().getSchemaCompatibilityStrategy(namespace)));
            try (Producer<V1.User> first = client.newProducer(schema(type, V1.User.class)).topic(topic).create()) {
                first.send(new V1.User("ada", 36));
                seen.put("producer", refusal(() -> client.newProducer(schema(type, V3.User.class)).topic(topic)
                        .create().close()));
                seen.put("consumer", refusal(() -> subscribe(client, schema(type, V3.User.class), topic, "v3")
                        .close()));
            }
            admin.namespaces().setSchemaCompatibilityStrategy(namespace, SchemaCompatibilityStrategy.ALWAYS_COMPATIBLE);
            seen.put("strategyAfter", String.valueOf(admin.namespaces().getSchemaCompatibilityStrategy(namespace)));
            try (Producer<V3.User> third = client.newProducer(schema(type, V3.User.class)).topic(topic).create()) {
                third.send(new V3.User("grace", "forty-five"));
                seen.put("producerAfter", "created");
            }
            try (Consumer<V3.User> consumer = subscribe(client, schema(type, V3.User.class), topic, "v3")) {
                seen.put("consumerAfter", "subscribed");
                List<Message<V3.User>> received = receive(consumer, 2);
                Message<V3.User> last = received.get(received.size() - 1);
                seen.put("lastAfter", v1Fields(last.getValue().name, last.getValue().age));
                seen.put("lastVersion", version(last.getSchemaVersion()));
            }
            seen.put("versions", admin.schemas().getAllSchemas(topic).size());
        }
        return seen;
    }

    private interface Step {
        void run() throws Exception;
    }

    private static Map<String, Object> refusal(Step step) {
        Map<String, Object> seen = new LinkedHashMap<>();
        try {
            step.run();
            seen.put("error", "none");
        } catch (Exception e) {
            seen.put("error", Util.errorClass(e));
            seen.put("message", Util.describe(e));
        }
        return seen;
    }

    private static Map<String, Object> fields(GenericRecord record) {
        Map<String, Object> values = new LinkedHashMap<>();
        for (Field field : record.getFields()) {
            Object value = record.getField(field);
            values.put(field.getName(), value == null ? null : value.toString());
        }
        return values;
    }

    private static List<Map<String, Object>> records(List<Message<GenericRecord>> messages) {
        List<Map<String, Object>> records = new ArrayList<>();
        for (Message<GenericRecord> message : messages) {
            Map<String, Object> record = new LinkedHashMap<>();
            record.put("fields", fields(message.getValue()));
            record.put("schemaType", message.getValue().getSchemaType().name());
            record.put("version", version(message.getSchemaVersion()));
            records.add(record);
        }
        return records;
    }

    /** An AUTO_CONSUME consumer reads `count` records another client wrote. */
    private static Map<String, Object> autoConsume(Args args) throws Exception {
        try (PulsarClient client = args.client();
                Consumer<GenericRecord> consumer = subscribe(client, Schema.AUTO_CONSUME(), args.topic(), "auto")) {
            return Map.of("received", records(receive(consumer, args.integer("count", 1))));
        }
    }

    /**
     * AUTO_CONSUME: GenericRecords of the topic's schema with the fields' values; AUTO_PRODUCE_BYTES:
     * bytes the producer checks against the topic's schema, read by a typed consumer.
     */
    private static Map<String, Object> auto(Args args) throws Exception {
        String type = args.str("type");
        String topic = args.topic();
        Schema<V1.User> typed = schema(type, V1.User.class);
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient client = args.client();
                Consumer<GenericRecord> auto = subscribe(client, Schema.AUTO_CONSUME(), topic, "auto")) {
            try (Producer<V1.User> producer = client.newProducer(typed).topic(topic).create()) {
                producer.send(new V1.User("ada", 36));
            }
            try (Producer<byte[]> bytes = client.newProducer(Schema.AUTO_PRODUCE_BYTES()).topic(topic).create()) {
                bytes.send(typed.encode(new V1.User("grace", 45)));
                seen.put("autoProduceInvalid", outcome(() -> bytes.send(new byte[] {(byte) 0xff, 1, 2})));
            }
            seen.put("autoConsumed", records(receive(auto, 2)));
            try (Consumer<V1.User> consumer = subscribe(client, typed, topic, "typed")) {
                seen.put("typed", receive(consumer, 2).stream().map(Schemas::v1).toList());
            }
        }
        return seen;
    }

    /** A consumer of V1 users (JSON or AVRO) reads what another client wrote. */
    private static Map<String, Object> consumeUsers(Args args) throws Exception {
        try (PulsarClient client = args.client();
                Consumer<V1.User> consumer = subscribe(client, schema(args.str("type"), V1.User.class), args.topic(),
                        "java")) {
            return Map.of("received", receive(consumer, args.integer("count", 1)).stream().map(Schemas::v1).toList());
        }
    }

    /** A producer of V1 users (JSON or AVRO) writes `count` users for another client. */
    private static Map<String, Object> produceUsers(Args args) throws Exception {
        int count = args.integer("count", 1);
        try (PulsarClient client = args.client();
                Producer<V1.User> producer = client.newProducer(schema(args.str("type"), V1.User.class))
                        .topic(args.topic()).create()) {
            for (int i = 0; i < count; i++) {
                producer.send(new V1.User("java-" + i, i));
            }
            return Map.of("sent", count);
        }
    }

    private static void call(Map<String, Object> seen, String name, Callable<Object> call) {
        try {
            seen.put(name, call.call());
        } catch (Exception e) {
            seen.put(name, "ERROR " + Util.describe(e));
        }
    }

    private static Map<String, Object> describe(SchemaInfo info) {
        Map<String, Object> seen = new LinkedHashMap<>();
        seen.put("type", info.getType().name());
        seen.put("schema", new String(info.getSchema(), StandardCharsets.UTF_8));
        seen.put("properties", info.getProperties());
        return seen;
    }

    /** The schema admin API: create, get (newest and by version), list, test compatibility, delete. */
    private static Map<String, Object> admin(Args args) throws Exception {
        String topic = args.topic();
        String v1 = new String(Schema.AVRO(V1.User.class).getSchemaInfo().getSchema(), StandardCharsets.UTF_8);
        String v2 = new String(Schema.AVRO(V2.User.class).getSchemaInfo().getSchema(), StandardCharsets.UTF_8);
        String v3 = new String(Schema.AVRO(V3.User.class).getSchemaInfo().getSchema(), StandardCharsets.UTF_8);
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarAdmin admin = args.admin()) {
            admin.topics().createNonPartitionedTopic(topic);
            call(seen, "missing", () -> admin.schemas().getSchemaInfo(topic));
            Map<String, String> properties = new HashMap<>(Map.of("owner", "compat"));
            call(seen, "create", () -> {
                admin.schemas().createSchema(topic, SchemaInfo.builder().name("users").type(SchemaType.AVRO)
                        .schema(v1.getBytes(StandardCharsets.UTF_8)).properties(properties).build());
                return "ok";
            });
            call(seen, "get", () -> describe(admin.schemas().getSchemaInfo(topic)));
            call(seen, "getWithVersion", () -> admin.schemas().getSchemaInfoWithVersion(topic).getVersion());
            call(seen, "compatibleV2", () -> {
                var answer = admin.schemas().testCompatibility(topic,
                        new PostSchemaPayload("AVRO", v2, Map.of()));
                return Map.of("compatibility", answer.isCompatibility(),
                        "strategy", answer.getSchemaCompatibilityStrategy());
            });
            call(seen, "compatibleV3", () -> {
                var answer = admin.schemas().testCompatibility(topic,
                        new PostSchemaPayload("AVRO", v3, Map.of()));
                return Map.of("compatibility", answer.isCompatibility(),
                        "strategy", answer.getSchemaCompatibilityStrategy());
            });
            call(seen, "createV2", () -> {
                admin.schemas().createSchema(topic, SchemaInfo.builder().name("users").type(SchemaType.AVRO)
                        .schema(v2.getBytes(StandardCharsets.UTF_8)).properties(Map.of()).build());
                return "ok";
            });
            call(seen, "createV3", () -> {
                admin.schemas().createSchema(topic, SchemaInfo.builder().name("users").type(SchemaType.AVRO)
                        .schema(v3.getBytes(StandardCharsets.UTF_8)).properties(Map.of()).build());
                return "ok";
            });
            call(seen, "all", () -> admin.schemas().getAllSchemas(topic).stream().map(Schemas::describe).toList());
            call(seen, "version0", () -> describe(admin.schemas().getSchemaInfo(topic, 0)));
            call(seen, "versionOf", () -> admin.schemas().getVersionBySchema(topic,
                    SchemaInfo.builder().name("users").type(SchemaType.AVRO).schema(v2.getBytes(StandardCharsets.UTF_8))
                            .properties(Map.of()).build()));
            call(seen, "delete", () -> {
                admin.schemas().deleteSchema(topic);
                return "ok";
            });
            call(seen, "afterDelete", () -> admin.schemas().getSchemaInfo(topic));
            call(seen, "allAfterDelete", () -> admin.schemas().getAllSchemas(topic).size());
            call(seen, "createAfterDelete", () -> {
                admin.schemas().createSchema(topic, SchemaInfo.builder().name("users").type(SchemaType.AVRO)
                        .schema(v3.getBytes(StandardCharsets.UTF_8)).properties(Map.of()).build());
                return admin.schemas().getSchemaInfoWithVersion(topic).getVersion();
            });
        }
        return seen;
    }

    /**
     * The namespace's schema policies: with auto-update off a new schema is refused and a known one
     * matched (a schema of another type is refused before that); with validation enforced a producer without a schema is refused on a topic with one; a
     * consumer with a schema is refused on a topic that has data but no schema.
     */
    private static Map<String, Object> policies(Args args) throws Exception {
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarAdmin admin = args.admin(); PulsarClient client = args.client()) {
            String namespace = ownNamespace(admin, args);
            String topic = "persistent://" + namespace + "/users";
            try (Producer<V1.User> first = client.newProducer(Schema.AVRO(V1.User.class)).topic(topic).create()) {
                first.send(new V1.User("ada", 36));
            }
            seen.put("stringProducerOnAvro", refusal(() -> client.newProducer(Schema.STRING).topic(topic).create()
                    .close()));
            admin.namespaces().setIsAllowAutoUpdateSchema(namespace, false);
            seen.put("autoUpdate", admin.namespaces().getIsAllowAutoUpdateSchema(namespace));
            seen.put("newSchemaWithoutAutoUpdate", refusal(() -> client.newProducer(Schema.AVRO(V2.User.class))
                    .topic(topic).create().close()));
            seen.put("knownSchemaWithoutAutoUpdate", refusal(() -> client.newProducer(Schema.AVRO(V1.User.class))
                    .topic(topic).create().close()));
            seen.put("bytesProducer", refusal(() -> client.newProducer().topic(topic).create().close()));
            admin.namespaces().setSchemaValidationEnforced(namespace, true);
            seen.put("validationEnforced", admin.namespaces().getSchemaValidationEnforced(namespace));
            seen.put("bytesProducerEnforced", refusal(() -> client.newProducer().topic(topic).create().close()));

            String plain = "persistent://" + namespace + "/plain";
            try (Producer<byte[]> bytes = client.newProducer().topic(plain).create()) {
                bytes.send(Util.bytes("no schema"));
            }
            seen.put("consumerOnDataWithoutSchema", refusal(() -> subscribe(client, Schema.AVRO(V1.User.class), plain,
                    "typed").close()));
        }
        return seen;
    }

    /** KEY_VALUE schemas, SEPARATED (the key in the message key) and INLINE, typed and AUTO_CONSUME. */
    private static Map<String, Object> keyValue(Args args) throws Exception {
        KeyValueEncodingType encoding = KeyValueEncodingType.valueOf(args.str("encoding"));
        Schema<KeyValue<String, V1.User>> schema = Schema.KeyValue(Schema.STRING, Schema.AVRO(V1.User.class),
                encoding);
        String topic = args.topic();
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient client = args.client();
                Consumer<KeyValue<String, V1.User>> consumer = subscribe(client, schema, topic, "typed");
                Producer<KeyValue<String, V1.User>> producer = client.newProducer(schema).topic(topic).create()) {
            producer.send(new KeyValue<>("k-1", new V1.User("ada", 36)));
            producer.send(new KeyValue<>("k-2", new V1.User("grace", 45)));
            List<Map<String, Object>> typed = new ArrayList<>();
            for (Message<KeyValue<String, V1.User>> message : receive(consumer, 2)) {
                KeyValue<String, V1.User> value = message.getValue();
                Map<String, Object> one = v1Fields(value.getValue().name, value.getValue().age);
                one.put("key", value.getKey());
                one.put("version", version(message.getSchemaVersion()));
                typed.add(one);
            }
            seen.put("typed", typed);
            try (Consumer<GenericRecord> auto = subscribe(client, Schema.AUTO_CONSUME(), topic, "auto")) {
                List<Map<String, Object>> records = new ArrayList<>();
                for (Message<GenericRecord> message : receive(auto, 2)) {
                    @SuppressWarnings("unchecked")
                    KeyValue<Object, GenericRecord> value =
                            (KeyValue<Object, GenericRecord>) message.getValue().getNativeObject();
                    Map<String, Object> one = fields(value.getValue());
                    one.put("key", String.valueOf(value.getKey()));
                    one.put("schemaType", message.getValue().getSchemaType().name());
                    records.add(one);
                }
                seen.put("autoConsumed", records);
            }
        }
        try (PulsarAdmin admin = args.admin()) {
            seen.put("registered", describe(admin.schemas().getSchemaInfo(topic)));
        }
        return seen;
    }

    /**
     * One producer, messages of several schemas (`newMessage(schema)`, which registers each with
     * GET_OR_CREATE_SCHEMA), batched: V1 and V2 messages in one batch stream, then a V3 message, which
     * the broker refuses. A V2 consumer and AUTO_CONSUME read each message by its version; a V2 reader
     * from the earliest message reads them again.
     */
    private static Map<String, Object> multi(Args args) throws Exception {
        String topic = args.topic();
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient client = args.client();
                Consumer<V2.User> consumer = subscribe(client, Schema.AVRO(V2.User.class), topic, "v2");
                Consumer<GenericRecord> auto = subscribe(client, Schema.AUTO_CONSUME(), topic, "auto")) {
            try (Producer<V1.User> producer = client.newProducer(Schema.AVRO(V1.User.class)).topic(topic)
                    .enableBatching(true).batchingMaxPublishDelay(20, TimeUnit.MILLISECONDS).create()) {
                List<java.util.concurrent.CompletableFuture<?>> sends = new ArrayList<>();
                sends.add(producer.sendAsync(new V1.User("ada", 36)));
                sends.add(producer.newMessage(Schema.AVRO(V2.User.class))
                        .value(new V2.User("grace", 45, "grace@example.com")).sendAsync());
                sends.add(producer.sendAsync(new V1.User("alan", 41)));
                for (var send : sends) {
                    send.get(10, TimeUnit.SECONDS);
                }
                seen.put("v3Send", outcome(() -> producer.newMessage(Schema.AVRO(V3.User.class))
                        .value(new V3.User("x", "old")).send()));
            }
            seen.put("v2Consumer", receive(consumer, 3).stream().map(Schemas::v2).toList());
            seen.put("autoConsumer", records(receive(auto, 3)));
            try (org.apache.pulsar.client.api.Reader<V2.User> reader = client.newReader(Schema.AVRO(V2.User.class))
                    .topic(topic).startMessageId(org.apache.pulsar.client.api.MessageId.earliest).create()) {
                List<Map<String, Object>> read = new ArrayList<>();
                while (read.size() < 3) {
                    Message<V2.User> message = reader.readNext(5, TimeUnit.SECONDS);
                    if (message == null) {
                        break;
                    }
                    read.add(v2(message));
                }
                seen.put("v2Reader", read);
            }
        }
        return seen;
    }
}
