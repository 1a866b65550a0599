package dev.magnetar.compat;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.LongRunningProcessStatus;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.TableView;

/**
 * Topic compaction through the official clients: compaction triggered and polled with PulsarAdmin or
 * started by a threshold, compacted readers and consumers, null-value tombstones, batches, TableView.
 */
final class Compaction {
    /** Status polls: often, so that a test waits little more than the compaction itself. */
    private static final long POLL_MS = 50;
    private static final long WAIT_MS = 15_000;

    private Compaction() {
    }

    static void register(Map<String, Compat.Scenario> scenarios) {
        scenarios.put("compaction_read", Compaction::read);
        scenarios.put("compaction_table_view", Compaction::tableView);
        scenarios.put("compaction_threshold", Compaction::threshold);
    }

    /** Sends [key, value] pairs in order (a null value is a tombstone), batched into one batch or one by one. */
    private static void produce(PulsarClient client, String topic, boolean batched, String[]... messages)
            throws Exception {
        List<CompletableFuture<MessageId>> sends = new ArrayList<>();
        try (Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(batched)
                .batchingMaxMessages(1000).batchingMaxPublishDelay(60, TimeUnit.SECONDS).create()) {
            for (String[] message : messages) {
                var builder = producer.newMessage().value(message[1] == null ? null : Util.bytes(message[1]));
                if (message[0] != null) {
                    builder.key(message[0]);
                }
                sends.add(builder.sendAsync());
                if (!batched) {
                    sends.get(sends.size() - 1).get(10, TimeUnit.SECONDS);
                }
            }
            producer.flush();
            for (var send : sends) {
                send.get(10, TimeUnit.SECONDS);
            }
        }
    }

    /** [key, value] of a message; value null for a tombstone. */
    private static List<String> pair(Message<byte[]> message) {
        byte[] value = message.getValue();
        return Arrays.asList(message.getKey(), value == null ? null : new String(value));
    }

    private static List<List<String>> pairs(List<Message<byte[]>> messages) {
        List<List<String>> seen = new ArrayList<>();
        for (Message<byte[]> message : messages) {
            seen.add(pair(message));
        }
        return seen;
    }

    /** Reads while hasMessageAvailable says so. */
    private static List<List<String>> readAvailable(Reader<byte[]> reader) throws Exception {
        List<Message<byte[]>> read = new ArrayList<>();
        while (reader.hasMessageAvailable()) {
            Message<byte[]> message = reader.readNext(5, TimeUnit.SECONDS);
            if (message == null) {
                break;
            }
            read.add(message);
        }
        return pairs(read);
    }

    private static String status(PulsarAdmin admin, String topic) throws Exception {
        LongRunningProcessStatus status = admin.topics().compactionStatus(topic);
        return status.status + (status.lastError == null || status.lastError.isEmpty() ? "" : ": " + status.lastError);
    }

    /** Polls compactionStatus until it is no longer RUNNING (or NOT_RUN, for a compaction not started yet). */
    private static String awaitCompaction(PulsarAdmin admin, String topic) throws Exception {
        long deadline = System.currentTimeMillis() + WAIT_MS;
        String status = status(admin, topic);
        while ((status.equals("RUNNING") || status.equals("NOT_RUN")) && System.currentTimeMillis() < deadline) {
            Thread.sleep(POLL_MS);
            status = status(admin, topic);
        }
        return status;
    }

    private static final String[][] BEFORE = {
        {"k0", "k0-v1"}, {"k1", "k1-v1"}, {"k2", "k2-v1"}, {"k3", "k3-v1"}, {"k4", "k4-v1"},
        {"k0", "k0-v2"}, {null, "no-key"}, {"k2", "k2-v2"}, {"k1", null},
    };
    private static final String[][] AFTER = {{"k0", "k0-v3"}, {"k4", null}};

    /**
     * Triggered compaction with PulsarAdmin; then a compacted reader and a compacted consumer read the
     * latest value of each key up to the horizon, then the messages after it; a plain reader reads all.
     */
    private static Map<String, Object> read(Args args) throws Exception {
        String topic = args.topic();
        boolean batched = args.flag("batched");
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient client = args.client(); PulsarAdmin admin = args.admin()) {
            produce(client, topic, batched, BEFORE);
            seen.put("statusBefore", status(admin, topic));
            admin.topics().triggerCompaction(topic);
            seen.put("status", awaitCompaction(admin, topic));
            try {
                admin.topics().triggerCompaction(topic + "-missing");
                seen.put("missingTopic", "ok");
            } catch (Exception e) {
                seen.put("missingTopic", Util.describe(e));
            }
            produce(client, topic, batched, AFTER);
            try (Reader<byte[]> reader = client.newReader().topic(topic).startMessageId(MessageId.earliest)
                    .readCompacted(true).create()) {
                seen.put("compactedReader", readAvailable(reader));
            }
            try (Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("compacted")
                    .readCompacted(true).subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                    .subscribe()) {
                List<Message<byte[]>> received = Util.receive(consumer, 100, 1000);
                for (Message<byte[]> message : received) {
                    consumer.acknowledge(message);
                }
                seen.put("compactedConsumer", pairs(received));
            }
            try (Reader<byte[]> reader = client.newReader().topic(topic).startMessageId(MessageId.earliest)
                    .create()) {
                seen.put("plainReader", readAvailable(reader));
            }
        }
        return seen;
    }

    private static Map<String, String> snapshot(TableView<byte[]> view) {
        Map<String, String> values = new TreeMap<>();
        view.forEach((key, value) -> values.put(key, new String(value)));
        return values;
    }

    /** TableView on a compacted topic: its values, tombstones removing keys, listeners told of updates. */
    private static Map<String, Object> tableView(Args args) throws Exception {
        String topic = args.topic();
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient client = args.client(); PulsarAdmin admin = args.admin()) {
            produce(client, topic, args.flag("batched"), BEFORE);
            admin.topics().triggerCompaction(topic);
            seen.put("status", awaitCompaction(admin, topic));
            try (TableView<byte[]> view = client.newTableView().topic(topic).create()) {
                seen.put("initial", snapshot(view));
                seen.put("size", view.size());
                seen.put("containsK1", view.containsKey("k1"));
                List<List<String>> updates = new CopyOnWriteArrayList<>();
                view.listen((key, value) -> updates.add(Arrays.asList(key, value == null ? null : new String(value))));
                produce(client, topic, false, new String[][] {{"k5", "k5-v1"}, {"k0", null}, {"k3", "k3-v2"}});
                long deadline = System.currentTimeMillis() + 5000;
                while (updates.size() < 3 && System.currentTimeMillis() < deadline) {
                    Thread.sleep(POLL_MS);
                }
                seen.put("updates", new ArrayList<>(updates));
                seen.put("after", snapshot(view));
            }
        }
        return seen;
    }

    /**
     * Automatic compaction: a topic's compactionThreshold (topicPolicies) or its namespace's
     * (namespaces) makes the broker compact the topic by itself once its backlog passes it.
     */
    private static Map<String, Object> threshold(Args args) throws Exception {
        String topic = args.topic();
        String level = args.str("level");
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient client = args.client(); PulsarAdmin admin = args.admin()) {
            String namespace = args.str("namespace");
            if (!level.equals("topic")) {
                admin.namespaces().createNamespace(namespace);
            }
            produce(client, topic, false, BEFORE);
            seen.put("statusBefore", status(admin, topic));
            if (level.equals("topic")) {
                admin.topicPolicies().setCompactionThreshold(topic, 10);
                seen.put("threshold", admin.topicPolicies().getCompactionThreshold(topic));
            } else {
                admin.namespaces().setCompactionThreshold(namespace, 10);
                seen.put("threshold", admin.namespaces().getCompactionThreshold(namespace));
            }
            seen.put("status", awaitCompaction(admin, topic));
            try (Reader<byte[]> reader = client.newReader().topic(topic).startMessageId(MessageId.earliest)
                    .readCompacted(true).create()) {
                seen.put("compactedReader", readAvailable(reader));
            }
            Map<String, Long> backlog = new ConcurrentHashMap<>();
            admin.topics().getStats(topic).getSubscriptions()
                    .forEach((name, stats) -> backlog.put(name, stats.getMsgBacklog()));
            seen.put("backlog", backlog);
        }
        return seen;
    }
}
