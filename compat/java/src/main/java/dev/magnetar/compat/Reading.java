package dev.magnetar.compat;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

/** Readers, seek, delayed delivery, partitioned topics and pattern subscriptions. */
final class Reading {
    private Reading() {
    }

    static void register(Map<String, Compat.Scenario> scenarios) {
        scenarios.put("reader_basic", Reading::readerBasic);
        scenarios.put("reader_batch", Reading::readerBatch);
        scenarios.put("reader_latest_inclusive", Reading::readerLatestInclusive);
        scenarios.put("seek_message_id", Reading::seekMessageId);
        scenarios.put("seek_time", Reading::seekTime);
        scenarios.put("delayed", Reading::delayed);
        scenarios.put("partitioned", Reading::partitioned);
        scenarios.put("pattern", Reading::pattern);
    }

    private static List<MessageId> produce(PulsarClient client, String topic, int count, boolean batched) throws Exception {
        List<CompletableFuture<MessageId>> sends = new ArrayList<>();
        try (Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(batched)
                .batchingMaxMessages(count).batchingMaxPublishDelay(60, TimeUnit.SECONDS).create()) {
            for (int i = 0; i < count; i++) {
                if (batched) {
                    sends.add(producer.sendAsync(Util.bytes("m-" + i)));
                } else {
                    sends.add(CompletableFuture.completedFuture(producer.send(Util.bytes("m-" + i))));
                }
            }
            producer.flush();
        }
        List<MessageId> ids = new ArrayList<>();
        for (var send : sends) {
            ids.add(send.get(10, TimeUnit.SECONDS));
        }
        return ids;
    }

    /** Read while hasMessageAvailable says so; then whether it says so again. */
    private static Map<String, Object> readAvailable(Reader<byte[]> reader) throws Exception {
        List<String> values = new ArrayList<>();
        while (reader.hasMessageAvailable()) {
            Message<byte[]> message = reader.readNext(5, TimeUnit.SECONDS);
            if (message == null) {
                values.add("<hasMessageAvailable but nothing to read>");
                break;
            }
            values.add(new String(message.getValue()));
        }
        return Map.of("values", values, "availableAfter", reader.hasMessageAvailable());
    }

    private static Reader<byte[]> reader(PulsarClient client, String topic, MessageId start, boolean inclusive) throws Exception {
        var builder = client.newReader().topic(topic).startMessageId(start);
        if (inclusive) {
            builder.startMessageIdInclusive();
        }
        return builder.create();
    }

    /** Readers from earliest, from an id (exclusive and inclusive) and from latest. */
    private static Map<String, Object> readerBasic(Args args) throws Exception {
        Map<String, Object> seen = new LinkedHashMap<>();
        String topic = args.topic();
        try (PulsarClient client = args.client()) {
            List<MessageId> ids = produce(client, topic, 10, false);
            try (Reader<byte[]> reader = reader(client, topic, MessageId.earliest, false)) {
                seen.put("earliest", readAvailable(reader));
            }
            try (Reader<byte[]> reader = reader(client, topic, ids.get(4), false)) {
                seen.put("afterFifth", readAvailable(reader));
            }
            try (Reader<byte[]> reader = reader(client, topic, ids.get(4), true)) {
                seen.put("fromFifthInclusive", readAvailable(reader));
            }
            try (Reader<byte[]> reader = reader(client, topic, MessageId.latest, false)) {
                seen.put("latestAvailable", reader.hasMessageAvailable());
                try (Producer<byte[]> producer = client.newProducer().topic(topic).create()) {
                    producer.send(Util.bytes("late"));
                }
                Message<byte[]> late = reader.readNext(5, TimeUnit.SECONDS);
                seen.put("latestRead", late == null ? null : new String(late.getValue()));
            }
        }
        return seen;
    }

    /** One batch of 5: readers from its third message, exclusive and inclusive. */
    private static Map<String, Object> readerBatch(Args args) throws Exception {
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient client = args.client()) {
            List<MessageId> ids = produce(client, args.topic(), 5, true);
            seen.put("ids", ids.stream().map(Util::id).toList());
            try (Reader<byte[]> reader = reader(client, args.topic(), ids.get(2), false)) {
                seen.put("afterThird", readAvailable(reader));
            }
            try (Reader<byte[]> reader = reader(client, args.topic(), ids.get(2), true)) {
                seen.put("fromThirdInclusive", readAvailable(reader));
            }
        }
        return seen;
    }

    /** startMessageId(latest) inclusive reads the last message, also when it is inside a batch. */
    private static Map<String, Object> readerLatestInclusive(Args args) throws Exception {
        try (PulsarClient client = args.client()) {
            List<MessageId> ids = produce(client, args.topic(), 5, args.flag("batched"));
            try (Reader<byte[]> reader = reader(client, args.topic(), MessageId.latest, true)) {
                Map<String, Object> seen = new LinkedHashMap<>(readAvailable(reader));
                seen.put("lastId", Util.id(ids.get(ids.size() - 1)));
                try (Consumer<byte[]> consumer = client.newConsumer().topic(args.topic()).subscriptionName("last")
                        .subscribe()) {
                    seen.put("lastMessageIds", consumer.getLastMessageIds().stream().map(Util::id).toList());
                }
                return seen;
            }
        }
    }

    /** A consumer seeks back to the 4th message, then to earliest. */
    private static Map<String, Object> seekMessageId(Args args) throws Exception {
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient client = args.client()) {
            List<MessageId> ids = produce(client, args.topic(), 10, args.flag("batched"));
            try (Consumer<byte[]> consumer = client.newConsumer().topic(args.topic()).subscriptionName("sub")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
                var received = Util.receive(consumer, 10, 5000);
                consumer.acknowledgeCumulative(received.get(received.size() - 1).getMessageId());
                consumer.seek(ids.get(3));
                seen.put("afterSeekToFourth", Util.expect(consumer, 6));
                consumer.seek(MessageId.earliest);
                seen.put("afterSeekToEarliest", Util.expect(consumer, 10));
            }
        }
        return seen;
    }

    /** A consumer and a reader seek by publish time to the second half of the messages (the 6th on). */
    private static Map<String, Object> seekTime(Args args) throws Exception {
        Map<String, Object> seen = new LinkedHashMap<>();
        String topic = args.topic();
        try (PulsarClient client = args.client()) {
            List<MessageId> ids = new ArrayList<>(produce(client, topic, 5, false));
            // The halves are published in different milliseconds.
            Thread.sleep(50);
            try (Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false).create()) {
                for (int i = 5; i < 10; i++) {
                    ids.add(producer.send(Util.bytes("m-" + i)));
                }
            }
            long secondHalf;
            try (Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("sub")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
                var received = Util.receive(consumer, 10, 5000);
                secondHalf = received.get(5).getPublishTime();
                consumer.acknowledge(received.stream().map(Message::getMessageId).toList());
                consumer.seek(secondHalf);
                seen.put("consumerAfterSeek", Util.expect(consumer, 5));
            }
            // A reader that started after the 8th message seeks back in time.
            try (Reader<byte[]> reader = reader(client, topic, ids.get(7), false)) {
                seen.put("readerBeforeSeek", Util.values(Util.read(reader, 2, 5000)));
                reader.seek(secondHalf);
                seen.put("readerAfterSeek", readAvailable(reader));
            }
        }
        return seen;
    }

    /** deliverAfter on a Shared subscription holds the message back; Exclusive ignores it, as in Pulsar. */
    private static Map<String, Object> delayed(Args args) throws Exception {
        SubscriptionType type = SubscriptionType.valueOf(args.str("subscriptionType"));
        int delayMs = args.integer("delayMs", 1500);
        try (PulsarClient client = args.client();
                Consumer<byte[]> consumer = client.newConsumer().topic(args.topic()).subscriptionName("sub")
                        .subscriptionType(type).subscribe();
                Producer<byte[]> producer = client.newProducer().topic(args.topic()).enableBatching(false).create()) {
            long sentAt = System.currentTimeMillis();
            producer.newMessage().value(Util.bytes("later")).deliverAfter(delayMs, TimeUnit.MILLISECONDS).send();
            producer.send(Util.bytes("now-1"));
            producer.send(Util.bytes("now-2"));
            List<String> order = new ArrayList<>();
            long laterAfterMs = -1;
            for (var message : Util.receive(consumer, 3, delayMs + 5000)) {
                String value = new String(message.getValue());
                order.add(value);
                if (value.equals("later")) {
                    laterAfterMs = System.currentTimeMillis() - sentAt;
                }
                consumer.acknowledge(message);
            }
            return Map.of("order", order, "laterAfterMs", laterAfterMs);
        }
    }

    /** A partitioned topic made with the admin client: keyed messages keep to one partition each. */
    private static Map<String, Object> partitioned(Args args) throws Exception {
        Map<String, Object> seen = new LinkedHashMap<>();
        String topic = args.topic();
        try (PulsarAdmin admin = args.admin(); PulsarClient client = args.client()) {
            admin.topics().createPartitionedTopic(topic, args.integer("partitions", 3));
            seen.put("partitions", client.getPartitionsForTopic(topic).get(10, TimeUnit.SECONDS));
            try (Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("sub")
                    .subscriptionType(SubscriptionType.Failover).subscribe();
                    Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false).create()) {
                seen.put("producerPartitions", ((org.apache.pulsar.client.impl.PartitionedProducerImpl<byte[]>) producer)
                        .getNumOfPartitions());
                for (int i = 0; i < 30; i++) {
                    producer.newMessage().key("key-" + (i % 6)).value(Util.bytes("key-" + (i % 6) + ":" + i)).send();
                }
                for (int i = 0; i < 6; i++) {
                    producer.send(Util.bytes("unkeyed-" + i));
                }
                var received = Util.receive(consumer, 36, 5000);
                consumer.acknowledge(received.stream().map(Message::getMessageId).toList());
                List<List<Object>> messages = new ArrayList<>();
                for (var message : received) {
                    messages.add(List.of(message.getTopicName(), new String(message.getValue())));
                }
                seen.put("received", messages);
            }
        }
        return seen;
    }

    /** A regex subscription finds the namespace's matching topics. */
    private static Map<String, Object> pattern(Args args) throws Exception {
        String topic = args.topic();
        try (PulsarClient client = args.client()) {
            for (String suffix : List.of("-a", "-b")) {
                try (Producer<byte[]> producer = client.newProducer().topic(topic + suffix).create()) {
                    producer.send(Util.bytes("to" + suffix));
                }
            }
            try (Consumer<byte[]> consumer = client.newConsumer().topicsPattern(Pattern.compile(topic + "-.*"))
                    .subscriptionName("sub").subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                    .subscribe()) {
                var received = Util.receive(consumer, 2, 5000);
                List<List<Object>> messages = new ArrayList<>();
                for (var message : received) {
                    messages.add(List.of(message.getTopicName(), new String(message.getValue())));
                }
                return Map.of("received", messages);
            }
        }
    }
}
