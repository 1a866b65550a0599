package dev.magnetar.compat;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.common.policies.data.PublisherStats;
import org.apache.pulsar.common.policies.data.ReplicatorStats;

/** Geo-replication between two clusters (r1 at serviceUrl/httpUrl, r2 at remoteServiceUrl/remoteHttpUrl). */
final class Replication {
    private static final long STATS_WAIT_MS = 20_000;

    private Replication() {
    }

    static void register(Map<String, Compat.Scenario> scenarios) {
        scenarios.put("geo_replicate", Replication::replicate);
    }

    /**
     * A producer in r1 sends one message with disableReplication, one with replicationClusters [r1], then
     * `count` keyed messages with a property and an event time; a consumer in r2 reports what arrived, as
     * the client sees a replicated message. Then r1's admin client reports its replicator to r2 once that
     * has confirmed everything, r2's the topic's publishers, and r1's answer to a topic policy without r1.
     */
    private static Map<String, Object> replicate(Args args) throws Exception {
        String topic = args.topic();
        int count = args.integer("count", 10);
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient local = args.client();
                PulsarClient remote = PulsarClient.builder().serviceUrl(args.str("remoteServiceUrl"))
                        .operationTimeout(10, TimeUnit.SECONDS).build();
                PulsarAdmin localAdmin = args.admin();
                PulsarAdmin remoteAdmin = PulsarAdmin.builder().serviceHttpUrl(args.str("remoteHttpUrl"))
                        .requestTimeout(10, TimeUnit.SECONDS).build()) {
            try (Consumer<byte[]> consumer = Producing.earliest(remote, topic, "compat");
                    Producer<byte[]> producer = local.newProducer().topic(topic).producerName("java-geo")
                            .enableBatching(false).create()) {
                producer.newMessage().value(Util.bytes("not-replicated")).disableReplication().send();
                producer.newMessage().value(Util.bytes("r1-only")).replicationClusters(List.of("r1")).send();
                for (int i = 0; i < count; i++) {
                    producer.newMessage().key("k-" + (i % 3)).property("index", Integer.toString(i))
                            .eventTime(1_000 + i).value(Util.bytes("m-" + i)).send();
                }
                List<Map<String, Object>> received = new ArrayList<>();
                for (Message<byte[]> message : Util.receive(consumer, count, 10_000)) {
                    Map<String, Object> described = Util.describe(message);
                    described.put("replicated", message.isReplicated());
                    described.put("replicatedFrom", message.getReplicatedFrom());
                    described.put("eventTime", message.getEventTime());
                    described.put("sequenceId", message.getSequenceId());
                    received.add(described);
                    consumer.acknowledge(message);
                }
                seen.put("received", received);
                seen.put("more", Util.values(Util.receive(consumer, 1, 1_000)));
            }
            seen.put("replicator", replicatorWhenDone(localAdmin, topic));
            List<String> publishers = new ArrayList<>();
            for (PublisherStats publisher : remoteAdmin.topics().getStats(topic).getPublishers()) {
                publishers.add(publisher.getProducerName());
            }
            seen.put("remotePublishers", publishers);
            seen.put("appliedClusters", new ArrayList<>(localAdmin.topics().getReplicationClusters(topic, true)));
            try {
                localAdmin.topics().setReplicationClusters(topic, List.of("r2"));
                seen.put("policyWithoutLocal", "accepted");
            } catch (PulsarAdminException e) {
                seen.put("policyWithoutLocal", e.getStatusCode() + " " + e.getHttpError());
            }
        }
        return seen;
    }

    /** r1's ReplicatorStats for r2, as the admin client parses it, once connected with no backlog. */
    private static Map<String, Object> replicatorWhenDone(PulsarAdmin admin, String topic) throws Exception {
        long deadline = System.currentTimeMillis() + STATS_WAIT_MS;
        ReplicatorStats stats = null;
        while (System.currentTimeMillis() < deadline) {
            stats = admin.topics().getStats(topic).getReplication().get("r2");
            if (stats != null && stats.isConnected() && stats.getReplicationBacklog() == 0) {
                break;
            }
            Thread.sleep(100);
        }
        Map<String, Object> seen = new LinkedHashMap<>();
        if (stats == null) {
            return seen;
        }
        seen.put("connected", stats.isConnected());
        seen.put("replicationBacklog", stats.getReplicationBacklog());
        seen.put("replicationDelayInSeconds", stats.getReplicationDelayInSeconds());
        seen.put("outboundConnection", stats.getOutboundConnection());
        seen.put("outboundConnectedSince", stats.getOutboundConnectedSince());
        seen.put("msgRateOut", stats.getMsgRateOut());
        return seen;
    }
}
