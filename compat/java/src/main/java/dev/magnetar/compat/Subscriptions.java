package dev.magnetar.compat;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.ConsumerBuilder;
import org.apache.pulsar.client.api.ConsumerEventListener;
import org.apache.pulsar.client.api.DeadLetterPolicy;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

/** Subscription types, acknowledgements of every kind, negative acks, dead-letter and retry topics. */
final class Subscriptions {
    private Subscriptions() {
    }

    static void register(Map<String, Compat.Scenario> scenarios) {
        scenarios.put("sub_exclusive", Subscriptions::exclusive);
        scenarios.put("sub_shared", Subscriptions::shared);
        scenarios.put("sub_failover", Subscriptions::failover);
        scenarios.put("sub_key_shared", Subscriptions::keyShared);
        scenarios.put("ack_individual", Subscriptions::ackIndividual);
        scenarios.put("ack_cumulative", Subscriptions::ackCumulative);
        scenarios.put("ack_list", Subscriptions::ackList);
        scenarios.put("ack_batch_index", Subscriptions::ackBatchIndex);
        scenarios.put("nack", Subscriptions::negativeAck);
        scenarios.put("dead_letter", Subscriptions::deadLetter);
        scenarios.put("retry_letter", Subscriptions::retryLetter);
    }

    private static ConsumerBuilder<byte[]> consumer(PulsarClient client, String topic, SubscriptionType type) {
        return client.newConsumer().topic(topic).subscriptionName("sub").subscriptionType(type)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest);
    }

    private static void produce(PulsarClient client, String topic, int count) throws Exception {
        try (Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false).create()) {
            for (int i = 0; i < count; i++) {
                producer.send(Util.bytes("m-" + i));
            }
        }
    }

    /** A second consumer on an Exclusive subscription is refused; the first gets everything. */
    private static Map<String, Object> exclusive(Args args) throws Exception {
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient client = args.client();
                Consumer<byte[]> first = consumer(client, args.topic(), SubscriptionType.Exclusive).subscribe()) {
            try (Consumer<byte[]> ignored = consumer(client, args.topic(), SubscriptionType.Exclusive).subscribe()) {
                seen.put("second", "subscribed");
            } catch (Exception e) {
                seen.put("second", Util.errorClass(e));
            }
            produce(client, args.topic(), 5);
            seen.put("values", Util.expect(first, 5));
        }
        return seen;
    }

    /** Two Shared consumers split the messages; together they see each exactly once. */
    private static Map<String, Object> shared(Args args) throws Exception {
        int count = args.integer("count", 40);
        try (PulsarClient client = args.client();
                Consumer<byte[]> first = consumer(client, args.topic(), SubscriptionType.Shared).receiverQueueSize(10).subscribe();
                Consumer<byte[]> second = consumer(client, args.topic(), SubscriptionType.Shared).receiverQueueSize(10).subscribe()) {
            produce(client, args.topic(), count);
            List<List<String>> both = drainBoth(first, second, count);
            return Map.of("first", both.get(0), "second", both.get(1));
        }
    }

    /**
     * Receive and ack on both consumers in turns (each until it has nothing for 100 ms, so that neither
     * queue stays full while the other drains) until `total` arrived, then a last short look at both.
     */
    private static List<List<String>> drainBoth(Consumer<byte[]> first, Consumer<byte[]> second, int total)
            throws Exception {
        List<List<String>> both = List.of(new ArrayList<>(), new ArrayList<>());
        List<Consumer<byte[]>> consumers = List.of(first, second);
        long deadline = System.currentTimeMillis() + 20_000;
        int received = 0;
        while (received < total && System.currentTimeMillis() < deadline) {
            for (int c = 0; c < 2; c++) {
                Message<byte[]> message;
                while ((message = consumers.get(c).receive(100, TimeUnit.MILLISECONDS)) != null) {
                    consumers.get(c).acknowledge(message);
                    both.get(c).add(new String(message.getValue()));
                    received++;
                }
            }
        }
        for (int c = 0; c < 2; c++) {
            both.get(c).addAll(Util.values(Util.receive(consumers.get(c), 1, 300)));
        }
        return both;
    }

    /**
     * Failover: one active consumer gets everything; when it leaves, the other becomes active and gets
     * what was not acknowledged.
     */
    private static Map<String, Object> failover(Args args) throws Exception {
        Map<String, Object> seen = new LinkedHashMap<>();
        List<String> events = Collections.synchronizedList(new ArrayList<>());
        try (PulsarClient client = args.client()) {
            Map<String, Consumer<byte[]>> consumers = new LinkedHashMap<>();
            for (String name : List.of("a", "b")) {
                consumers.put(name, consumer(client, args.topic(), SubscriptionType.Failover).consumerName(name)
                        .consumerEventListener(new ConsumerEventListener() {
                            @Override
                            public void becameActive(Consumer<?> consumer, int partitionId) {
                                events.add(name + " active");
                            }

                            @Override
                            public void becameInactive(Consumer<?> consumer, int partitionId) {
                                events.add(name + " inactive");
                            }
                        }).subscribe());
            }
            produce(client, args.topic(), 10);
            Map<String, List<String>> firstRound = new LinkedHashMap<>();
            String active = null;
            for (var entry : consumers.entrySet()) {
                var received = Util.receive(entry.getValue(), 5, 500);
                firstRound.put(entry.getKey(), Util.values(received));
                for (var message : received) {
                    entry.getValue().acknowledge(message);
                }
                if (!received.isEmpty()) {
                    active = entry.getKey();
                }
            }
            seen.put("firstRound", firstRound);
            seen.put("eventsBeforeClose", new ArrayList<>(events));
            if (active != null) {
                consumers.remove(active).close();
                Map<String, List<String>> secondRound = new LinkedHashMap<>();
                for (var entry : consumers.entrySet()) {
                    secondRound.put(entry.getKey(), Util.expect(entry.getValue(), 5));
                }
                seen.put("secondRound", secondRound);
            }
            for (var consumer : consumers.values()) {
                consumer.close();
            }
        }
        return seen;
    }

    /** Key_Shared: every key goes to one consumer, in order. */
    private static Map<String, Object> keyShared(Args args) throws Exception {
        int keys = args.integer("keys", 20);
        int perKey = args.integer("perKey", 5);
        try (PulsarClient client = args.client();
                Consumer<byte[]> first = consumer(client, args.topic(), SubscriptionType.Key_Shared).subscribe();
                Consumer<byte[]> second = consumer(client, args.topic(), SubscriptionType.Key_Shared).subscribe()) {
            try (Producer<byte[]> producer = client.newProducer().topic(args.topic()).enableBatching(false).create()) {
                for (int i = 0; i < perKey; i++) {
                    for (int k = 0; k < keys; k++) {
                        producer.newMessage().key("key-" + k).value(Util.bytes("key-" + k + ":" + i)).send();
                    }
                }
            }
            Map<String, Object> seen = new LinkedHashMap<>();
            List<List<String>> both = drainBoth(first, second, keys * perKey);
            seen.put("first", both.get(0));
            seen.put("second", both.get(1));
            return seen;
        }
    }

    /** Acks some messages one by one; a new consumer of the subscription gets exactly the others. */
    private static Map<String, Object> ackIndividual(Args args) throws Exception {
        try (PulsarClient client = args.client()) {
            produce(client, args.topic(), 10);
            try (Consumer<byte[]> consumer = consumer(client, args.topic(), SubscriptionType.Shared).subscribe()) {
                for (var message : Util.receive(consumer, 10, 5000)) {
                    if (Integer.parseInt(new String(message.getValue()).substring(2)) % 2 == 0) {
                        consumer.acknowledge(message);
                    }
                }
            }
            try (Consumer<byte[]> consumer = consumer(client, args.topic(), SubscriptionType.Shared).subscribe()) {
                return Map.of("redelivered", Util.expect(consumer, 5));
            }
        }
    }

    /** A cumulative ack of the 6th message: a new consumer starts at the 7th. */
    private static Map<String, Object> ackCumulative(Args args) throws Exception {
        try (PulsarClient client = args.client()) {
            produce(client, args.topic(), 10);
            try (Consumer<byte[]> consumer = consumer(client, args.topic(), SubscriptionType.Exclusive).subscribe()) {
                var received = Util.receive(consumer, 10, 5000);
                consumer.acknowledgeCumulative(received.get(5).getMessageId());
            }
            try (Consumer<byte[]> consumer = consumer(client, args.topic(), SubscriptionType.Exclusive).subscribe()) {
                return Map.of("redelivered", Util.expect(consumer, 4));
            }
        }
    }

    /** acknowledge(List) with ack receipts: the broker confirms, and only the others come back. */
    private static Map<String, Object> ackList(Args args) throws Exception {
        try (PulsarClient client = args.client()) {
            produce(client, args.topic(), 10);
            try (Consumer<byte[]> consumer = consumer(client, args.topic(), SubscriptionType.Shared)
                    .isAckReceiptEnabled(true).subscribe()) {
                List<MessageId> firstHalf = new ArrayList<>();
                for (var message : Util.receive(consumer, 10, 5000).subList(0, 5)) {
                    firstHalf.add(message.getMessageId());
                }
                consumer.acknowledge(firstHalf);
            }
            try (Consumer<byte[]> consumer = consumer(client, args.topic(), SubscriptionType.Shared).subscribe()) {
                return Map.of("redelivered", Util.expect(consumer, 5));
            }
        }
    }

    /**
     * One batch of 10; batch-index acks of the even indexes; a new consumer gets only the odd ones
     * (the broker sends the batch with an ack set the client filters by).
     */
    private static Map<String, Object> ackBatchIndex(Args args) throws Exception {
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient client = args.client()) {
            try (Producer<byte[]> producer = client.newProducer().topic(args.topic()).enableBatching(true)
                    .batchingMaxMessages(10).batchingMaxPublishDelay(60, TimeUnit.SECONDS).create()) {
                for (int i = 0; i < 10; i++) {
                    producer.sendAsync(Util.bytes("m-" + i));
                }
                producer.flush();
            }
            try (Consumer<byte[]> consumer = consumer(client, args.topic(), SubscriptionType.Shared)
                    .enableBatchIndexAcknowledgment(true).isAckReceiptEnabled(true).subscribe()) {
                var received = Util.receive(consumer, 10, 5000);
                List<List<Long>> ids = new ArrayList<>();
                for (var message : received) {
                    ids.add(Util.id(message.getMessageId()));
                    if (Integer.parseInt(new String(message.getValue()).substring(2)) % 2 == 0) {
                        consumer.acknowledge(message);
                    }
                }
                seen.put("ids", ids);
            }
            try (Consumer<byte[]> consumer = consumer(client, args.topic(), SubscriptionType.Shared)
                    .enableBatchIndexAcknowledgment(true).subscribe()) {
                seen.put("redelivered", Util.expect(consumer, 5));
            }
        }
        return seen;
    }

    /** A negatively acked message comes back, with its redelivery count. */
    private static Map<String, Object> negativeAck(Args args) throws Exception {
        try (PulsarClient client = args.client();
                Consumer<byte[]> consumer = consumer(client, args.topic(), SubscriptionType.Shared)
                        .negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS).subscribe()) {
            produce(client, args.topic(), 3);
            List<Map<String, Object>> deliveries = new ArrayList<>();
            for (var message : Util.receive(consumer, 3, 5000)) {
                deliveries.add(Util.describe(message));
                if (new String(message.getValue()).equals("m-1")) {
                    consumer.negativeAcknowledge(message);
                } else {
                    consumer.acknowledge(message);
                }
            }
            var again = Util.receive(consumer, 1, 5000);
            deliveries.addAll(Util.describeAll(again));
            for (var message : again) {
                consumer.acknowledge(message);
            }
            return Map.of("deliveries", deliveries, "more", Util.values(Util.receive(consumer, 1, 500)));
        }
    }

    /**
     * maxRedeliverCount 2: a message nacked every time goes to the dead-letter topic after its third
     * delivery (counts 0, 1, 2), with the original topic and id in its properties.
     */
    private static Map<String, Object> deadLetter(Args args) throws Exception {
        String deadLetterTopic = args.topic() + "-DLQ";
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient client = args.client();
                Consumer<byte[]> dead = client.newConsumer().topic(deadLetterTopic).subscriptionName("dlq")
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
                Consumer<byte[]> consumer = consumer(client, args.topic(), SubscriptionType.Shared)
                        .negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS)
                        .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(2)
                                .deadLetterTopic(deadLetterTopic).build())
                        .subscribe();
                Producer<byte[]> producer = client.newProducer().topic(args.topic()).enableBatching(false).create()) {
            MessageId poisonId = producer.send(Util.bytes("poison"));
            producer.send(Util.bytes("fine"));
            seen.put("poisonId", Util.id(poisonId));
            List<String> deliveries = new ArrayList<>();
            // Four deliveries are due (poison 3 times, fine once); a fifth is looked for briefly.
            while (deliveries.size() < 5) {
                Message<byte[]> message = consumer.receive(deliveries.size() < 4 ? 5000 : 300, TimeUnit.MILLISECONDS);
                if (message == null) {
                    break;
                }
                String value = new String(message.getValue());
                deliveries.add(value + "#" + message.getRedeliveryCount());
                if (value.equals("poison")) {
                    consumer.negativeAcknowledge(message);
                } else {
                    consumer.acknowledge(message);
                }
            }
            seen.put("deliveries", deliveries);
            var dlq = Util.receive(dead, 1, 5000);
            dlq.addAll(Util.receive(dead, 1, 300));
            seen.put("deadLetters", Util.describeAll(dlq));
        }
        return seen;
    }

    /** reconsumeLater: the message comes back through the retry topic, after the delay, counted. */
    private static Map<String, Object> retryLetter(Args args) throws Exception {
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient client = args.client();
                Consumer<byte[]> consumer = consumer(client, args.topic(), SubscriptionType.Shared).enableRetry(true)
                        .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(5).build()).subscribe();
                Producer<byte[]> producer = client.newProducer().topic(args.topic()).enableBatching(false).create()) {
            producer.send(Util.bytes("again"));
            Message<byte[]> first = consumer.receive(5, TimeUnit.SECONDS);
            long reconsumedAt = System.currentTimeMillis();
            consumer.reconsumeLater(first, 1, TimeUnit.SECONDS);
            Message<byte[]> second = consumer.receive(10, TimeUnit.SECONDS);
            seen.put("first", Util.describe(first));
            seen.put("second", second == null ? null : Util.describe(second));
            seen.put("delayMs", second == null ? -1 : System.currentTimeMillis() - reconsumedAt);
            if (second != null) {
                consumer.acknowledge(second);
            }
        }
        return seen;
    }
}
