package dev.magnetar.compat;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.CompressionType;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerAccessMode;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;

/** Producers: plain sends, every access mode, batching and compression. */
final class Producing {
    private Producing() {
    }

    static void register(Map<String, Compat.Scenario> scenarios) {
        scenarios.put("produce_consume", Producing::produceConsume);
        scenarios.put("consume", Producing::consume);
        scenarios.put("access_shared", Producing::accessShared);
        scenarios.put("access_exclusive", Producing::accessExclusive);
        scenarios.put("access_fencing", Producing::accessFencing);
        scenarios.put("access_wait", Producing::accessWait);
        scenarios.put("batch_compression", Producing::batchCompression);
    }

    static Consumer<byte[]> earliest(PulsarClient client, String topic, String subscription) throws Exception {
        return client.newConsumer().topic(topic).subscriptionName(subscription)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
    }

    /** Unbatched sends with keys and properties, then a consumer reads them back. */
    private static Map<String, Object> produceConsume(Args args) throws Exception {
        int count = args.integer("count", 10);
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient client = args.client()) {
            List<List<Long>> sent = new ArrayList<>();
            try (Producer<byte[]> producer = client.newProducer().topic(args.topic()).enableBatching(false).create()) {
                seen.put("producerName", producer.getProducerName());
                for (int i = 0; i < count; i++) {
                    MessageId id = producer.newMessage().key("k-" + (i % 3)).property("index", Integer.toString(i))
                            .value(Util.bytes("m-" + i)).send();
                    sent.add(Util.id(id));
                }
                seen.put("lastSequenceId", producer.getLastSequenceId());
            }
            seen.put("sent", sent);
            try (Consumer<byte[]> consumer = earliest(client, args.topic(), "compat")) {
                var received = Util.receive(consumer, count, 5000);
                for (var message : received) {
                    consumer.acknowledge(message);
                }
                seen.put("received", Util.describeAll(received));
                seen.put("more", Util.values(Util.receive(consumer, 1, 300)));
            }
        }
        return seen;
    }

    /** A consumer reads `count` messages another client wrote. */
    private static Map<String, Object> consume(Args args) throws Exception {
        try (PulsarClient client = args.client();
                Consumer<byte[]> consumer = earliest(client, args.topic(), args.str("subscription", "compat"))) {
            var received = Util.receive(consumer, args.integer("count", 1), 5000);
            consumer.acknowledge(received.stream().map(m -> m.getMessageId()).toList());
            return Map.of("received", Util.describeAll(received));
        }
    }

    private static Producer<byte[]> producer(PulsarClient client, String topic, String name, ProducerAccessMode mode)
            throws Exception {
        return client.newProducer().topic(topic).producerName(name).accessMode(mode).enableBatching(false)
                .sendTimeout(10, TimeUnit.SECONDS).create();
    }

    private static String tryCreate(PulsarClient client, String topic, String name, ProducerAccessMode mode) {
        try (Producer<byte[]> ignored = producer(client, topic, name, mode)) {
            return "created";
        } catch (Exception e) {
            return Util.errorClass(e);
        }
    }

    /** The topic's `count` messages, then whatever else arrives within a short wait. */
    private static List<String> readAll(PulsarClient client, String topic, int count) throws Exception {
        try (Consumer<byte[]> consumer = earliest(client, topic, "check")) {
            List<String> values = Util.values(Util.receive(consumer, count, 3000));
            values.addAll(Util.values(Util.receive(consumer, 1, 300)));
            return values;
        }
    }

    /** Two Shared producers publish side by side. */
    private static Map<String, Object> accessShared(Args args) throws Exception {
        try (PulsarClient client = args.client();
                Producer<byte[]> first = producer(client, args.topic(), "first", ProducerAccessMode.Shared);
                Producer<byte[]> second = producer(client, args.topic(), "second", ProducerAccessMode.Shared)) {
            first.send(Util.bytes("from-first"));
            second.send(Util.bytes("from-second"));
            return Map.of("values", readAll(client, args.topic(), 2));
        }
    }

    /** An Exclusive producer keeps every other producer out until it closes. */
    private static Map<String, Object> accessExclusive(Args args) throws Exception {
        Map<String, Object> seen = new LinkedHashMap<>();
        String topic = args.topic();
        try (PulsarClient client = args.client()) {
            try (Producer<byte[]> owner = producer(client, topic, "owner", ProducerAccessMode.Exclusive)) {
                owner.send(Util.bytes("by-owner"));
                seen.put("sharedWhileExclusive", tryCreate(client, topic, "shared", ProducerAccessMode.Shared));
                seen.put("exclusiveWhileExclusive", tryCreate(client, topic, "other", ProducerAccessMode.Exclusive));
            }
            try (Producer<byte[]> shared = producer(client, topic, "shared", ProducerAccessMode.Shared)) {
                seen.put("exclusiveWhileShared", tryCreate(client, topic, "other", ProducerAccessMode.Exclusive));
            }
            try (Producer<byte[]> next = producer(client, topic, "next", ProducerAccessMode.Exclusive)) {
                next.send(Util.bytes("by-next"));
                seen.put("exclusiveAfterClose", "created");
            }
            seen.put("values", readAll(client, topic, 2));
        }
        return seen;
    }

    /**
     * ExclusiveWithFencing takes the topic from the producer that has it: the old one is fenced (its
     * sends fail with ProducerFencedException), and the new one publishes.
     */
    private static Map<String, Object> accessFencing(Args args) throws Exception {
        Map<String, Object> seen = new LinkedHashMap<>();
        String topic = args.topic();
        try (PulsarClient oldClient = args.client(); PulsarClient newClient = args.client();
                PulsarClient newestClient = args.client()) {
            Producer<byte[]> old = producer(oldClient, topic, "old", ProducerAccessMode.Exclusive);
            old.send(Util.bytes("old-1"));
            Producer<byte[]> fencing = producer(newClient, topic, "fencing", ProducerAccessMode.ExclusiveWithFencing);
            fencing.send(Util.bytes("fencing-1"));
            seen.put("oldSendAfterFencing", sendResult(old, "old-2"));
            seen.put("oldConnected", old.isConnected());
            Producer<byte[]> newest = producer(newestClient, topic, "newest", ProducerAccessMode.ExclusiveWithFencing);
            newest.send(Util.bytes("newest-1"));
            seen.put("fencingSendAfterFencing", sendResult(fencing, "fencing-2"));
            seen.put("sharedWhileFencing", tryCreate(oldClient, topic, "shared", ProducerAccessMode.Shared));
            newest.close();
            seen.put("values", readAll(newClient, topic, 3));
        }
        return seen;
    }

    private static String sendResult(Producer<byte[]> producer, String value) {
        try {
            producer.send(Util.bytes(value));
            return "sent";
        } catch (Exception e) {
            return Util.errorClass(e);
        }
    }

    /** WaitForExclusive is parked while another producer has the topic, and takes over when it leaves. */
    private static Map<String, Object> accessWait(Args args) throws Exception {
        Map<String, Object> seen = new LinkedHashMap<>();
        String topic = args.topic();
        try (PulsarClient client = args.client(); PulsarClient waitingClient = args.client()) {
            Producer<byte[]> owner = producer(client, topic, "owner", ProducerAccessMode.Exclusive);
            CompletableFuture<Producer<byte[]>> waiting = waitingClient.newProducer().topic(topic).producerName("waiter")
                    .accessMode(ProducerAccessMode.WaitForExclusive).enableBatching(false).createAsync();
            owner.send(Util.bytes("by-owner"));
            Thread.sleep(500);
            seen.put("waiterReadyWhileOwned", waiting.isDone());
            owner.close();
            Producer<byte[]> waiter = waiting.get(10, TimeUnit.SECONDS);
            waiter.send(Util.bytes("by-waiter"));
            seen.put("waiterName", waiter.getProducerName());
            waiter.close();
            seen.put("values", readAll(client, topic, 2));
        }
        return seen;
    }

    /**
     * Batches of `batchSize` (filled by count: the publish delay is far longer than the run), compressed
     * with `compression`; the consumer sees every value in order with its batch index.
     */
    private static Map<String, Object> batchCompression(Args args) throws Exception {
        int count = args.integer("count", 25);
        int batchSize = args.integer("batchSize", 10);
        CompressionType compression = CompressionType.valueOf(args.str("compression"));
        try (PulsarClient client = args.client()) {
            List<CompletableFuture<MessageId>> sends = new ArrayList<>();
            try (Producer<byte[]> producer = client.newProducer().topic(args.topic()).compressionType(compression)
                    .enableBatching(true).batchingMaxMessages(batchSize)
                    .batchingMaxPublishDelay(60, TimeUnit.SECONDS).create()) {
                for (int i = 0; i < count; i++) {
                    // Repetitive, so that every codec really shrinks it.
                    sends.add(producer.sendAsync(Util.bytes("value-" + i + "-" + "abc".repeat(50))));
                }
                producer.flush();
            }
            List<List<Long>> sent = new ArrayList<>();
            for (var send : sends) {
                sent.add(Util.id(send.get(10, TimeUnit.SECONDS)));
            }
            try (Consumer<byte[]> consumer = earliest(client, args.topic(), "compat")) {
                var received = Util.receive(consumer, count, 5000);
                consumer.acknowledge(received.stream().map(m -> m.getMessageId()).toList());
                List<List<Long>> ids = new ArrayList<>();
                for (var message : received) {
                    ids.add(Util.id(message.getMessageId()));
                }
                // Each value is reported up to its repetitive tail, which must have survived intact.
                List<String> values = new ArrayList<>();
                for (String value : Util.values(received)) {
                    String head = value.substring(0, value.indexOf("-abc"));
                    values.add(value.equals(head + "-" + "abc".repeat(50)) ? head : "<damaged> " + value);
                }
                return Map.of("sent", sent, "ids", ids, "values", values);
            }
        }
    }
}
