package dev.magnetar.compat;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.common.naming.TopicVersion;
import org.apache.pulsar.common.policies.data.BrokerInfo;
import org.apache.pulsar.common.policies.data.TenantInfo;

/**
 * The admin calls users make most, through the official PulsarAdmin. Each call's answer (or its error)
 * is reported on its own, so that one refused call does not hide what the others did.
 */
final class Admin {
    private Admin() {
    }

    static void register(Map<String, Compat.Scenario> scenarios) {
        scenarios.put("admin_namespaces", Admin::namespaces);
        scenarios.put("admin_subscriptions", Admin::subscriptions);
        scenarios.put("admin_brokers", Admin::brokers);
        scenarios.put("http_lookup", Admin::httpLookup);
    }

    private static void call(Map<String, Object> seen, String name, Callable<Object> call) {
        try {
            seen.put(name, call.call());
        } catch (Exception e) {
            seen.put(name, "ERROR " + Util.describe(e));
        }
    }

    /** Clusters, tenants, namespaces, topics and partitioned topics: create, list, delete. */
    private static Map<String, Object> namespaces(Args args) throws Exception {
        String tenant = args.str("tenant");
        String namespace = tenant + "/ns";
        String topic = "persistent://" + namespace + "/plain";
        String partitioned = "persistent://" + namespace + "/parts";
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarAdmin admin = args.admin()) {
            call(seen, "clusters", () -> admin.clusters().getClusters());
            call(seen, "createTenant", () -> {
                admin.tenants().createTenant(tenant, TenantInfo.builder().allowedClusters(Set.of("standalone")).build());
                return "ok";
            });
            call(seen, "tenants", () -> admin.tenants().getTenants());
            call(seen, "tenantClusters", () -> admin.tenants().getTenantInfo(tenant).getAllowedClusters());
            call(seen, "createNamespace", () -> {
                admin.namespaces().createNamespace(namespace);
                return "ok";
            });
            call(seen, "namespaces", () -> admin.namespaces().getNamespaces(tenant));
            call(seen, "createTopic", () -> {
                admin.topics().createNonPartitionedTopic(topic);
                return "ok";
            });
            call(seen, "createPartitionedTopic", () -> {
                admin.topics().createPartitionedTopic(partitioned, 3);
                return "ok";
            });
            call(seen, "topics", () -> admin.topics().getList(namespace));
            call(seen, "partitionedTopics", () -> admin.topics().getPartitionedTopicList(namespace));
            call(seen, "partitionedMetadata", () -> admin.topics().getPartitionedTopicMetadata(partitioned).partitions);
            call(seen, "updatePartitionedTopic", () -> {
                admin.topics().updatePartitionedTopic(partitioned, 4);
                return admin.topics().getPartitionedTopicMetadata(partitioned).partitions;
            });
            call(seen, "deleteTopic", () -> {
                admin.topics().delete(topic);
                return "ok";
            });
            call(seen, "deletePartitionedTopic", () -> {
                admin.topics().deletePartitionedTopic(partitioned);
                return "ok";
            });
            call(seen, "topicsAfterDelete", () -> admin.topics().getList(namespace));
            call(seen, "deleteNamespace", () -> {
                admin.namespaces().deleteNamespace(namespace);
                return "ok";
            });
            call(seen, "namespacesAfterDelete", () -> admin.namespaces().getNamespaces(tenant));
            call(seen, "deleteTenant", () -> {
                admin.tenants().deleteTenant(tenant);
                return "ok";
            });
            call(seen, "tenantsAfterDelete", () -> admin.tenants().getTenants());
        }
        return seen;
    }

    /** Stats and subscriptions: create, list, skip, reset cursor (by time and by id), peek, delete. */
    private static Map<String, Object> subscriptions(Args args) throws Exception {
        String topic = args.topic();
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarAdmin admin = args.admin(); PulsarClient client = args.client()) {
            List<MessageId> ids = new ArrayList<>();
            List<Long> publishTimes = new ArrayList<>();
            try (Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false).create()) {
                for (int i = 0; i < 10; i++) {
                    ids.add(producer.send(Util.bytes("m-" + i)));
                    if (i == 4) {
                        Thread.sleep(50); // the halves are published in different milliseconds
                    }
                }
            }
            try (Consumer<byte[]> reader = client.newConsumer().topic(topic).subscriptionName("probe")
                    .subscriptionInitialPosition(org.apache.pulsar.client.api.SubscriptionInitialPosition.Earliest)
                    .subscribe()) {
                for (var message : Util.receive(reader, 10, 5000)) {
                    publishTimes.add(message.getPublishTime());
                }
                reader.unsubscribe();
            }
            call(seen, "createEarliest", () -> {
                admin.topics().createSubscription(topic, "from-earliest", MessageId.earliest);
                return "ok";
            });
            call(seen, "createLatest", () -> {
                admin.topics().createSubscription(topic, "from-latest", MessageId.latest);
                return "ok";
            });
            call(seen, "subscriptions", () -> admin.topics().getSubscriptions(topic));
            call(seen, "msgInCounter", () -> admin.topics().getStats(topic).getMsgInCounter());
            call(seen, "backlogs", () -> backlogs(admin, topic));
            call(seen, "peek", () -> admin.topics().peekMessages(topic, "from-earliest", 2).stream()
                    .map(m -> new String(m.getData())).toList());
            call(seen, "backlogAfterSkip3", () -> {
                admin.topics().skipMessages(topic, "from-earliest", 3);
                return backlogs(admin, topic).get("from-earliest");
            });
            call(seen, "backlogAfterResetToSixthByTime", () -> {
                admin.topics().resetCursor(topic, "from-earliest", publishTimes.get(5));
                return backlogs(admin, topic).get("from-earliest");
            });
            call(seen, "backlogAfterResetToThirdById", () -> {
                admin.topics().resetCursor(topic, "from-earliest", ids.get(2));
                return backlogs(admin, topic).get("from-earliest");
            });
            call(seen, "consumedAfterReset", () -> {
                try (Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("from-earliest")
                        .subscribe()) {
                    return Util.expect(consumer, 8);
                }
            });
            call(seen, "backlogAfterSkipAll", () -> {
                admin.topics().skipAllMessages(topic, "from-earliest");
                return backlogs(admin, topic).get("from-earliest");
            });
            call(seen, "lastMessageId", () -> Util.id(admin.topics().getLastMessageId(topic)));
            call(seen, "deleteSubscription", () -> {
                admin.topics().deleteSubscription(topic, "from-latest");
                return admin.topics().getSubscriptions(topic);
            });
            String partitioned = topic + "-parts";
            call(seen, "partitionedStatsMsgIn", () -> {
                admin.topics().createPartitionedTopic(partitioned, 2);
                try (Producer<byte[]> producer = client.newProducer().topic(partitioned).enableBatching(false).create()) {
                    for (int i = 0; i < 6; i++) {
                        producer.send(Util.bytes("p-" + i));
                    }
                }
                return admin.topics().getPartitionedStats(partitioned, true).getMsgInCounter();
            });
        }
        return seen;
    }

    private static Map<String, Long> backlogs(PulsarAdmin admin, String topic) throws Exception {
        Map<String, Long> backlogs = new LinkedHashMap<>();
        admin.topics().getStats(topic).getSubscriptions().forEach((name, stats) -> backlogs.put(name, stats.getMsgBacklog()));
        return backlogs;
    }

    /** The brokers endpoints: health, leader, active brokers, owned namespaces, configuration listings. */
    private static Map<String, Object> brokers(Args args) throws Exception {
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarAdmin admin = args.admin()) {
            call(seen, "healthcheck", () -> {
                admin.brokers().healthcheck(TopicVersion.V2);
                return "ok";
            });
            call(seen, "leader", () -> {
                BrokerInfo leader = admin.brokers().getLeaderBroker();
                return Map.of("serviceUrl", leader.getServiceUrl(), "brokerId", leader.getBrokerId());
            });
            call(seen, "activeBrokers", () -> admin.brokers().getActiveBrokers("standalone"));
            call(seen, "activeBrokersOfThisCluster", () -> admin.brokers().getActiveBrokers());
            call(seen, "ownedNamespaces", () -> {
                String broker = admin.brokers().getActiveBrokers("standalone").get(0);
                Map<String, Object> owned = new LinkedHashMap<>();
                admin.brokers().getOwnedNamespaces("standalone", broker).forEach((bundle, status) -> owned.put(bundle,
                        Map.of("broker_assignment", status.broker_assignment.toString(),
                                "is_controlled", status.is_controlled, "is_active", status.is_active)));
                return owned;
            });
            call(seen, "dynamicConfigurationNames", () -> admin.brokers().getDynamicConfigurationNames());
            call(seen, "dynamicConfigurations", () -> admin.brokers().getAllDynamicConfigurations());
            call(seen, "runtimeConfigurations", () -> {
                Map<String, String> runtime = admin.brokers().getRuntimeConfigurations();
                return Map.of("clusterName", runtime.get("clusterName"),
                        "allowAutoTopicCreation", runtime.get("allowAutoTopicCreation"), "keys", runtime.size());
            });
        }
        return seen;
    }

    /** A client of the http:// service URL produces and consumes on a plain and on a partitioned topic. */
    private static Map<String, Object> httpLookup(Args args) throws Exception {
        String plain = args.topic();
        String partitioned = plain + "-parts";
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarAdmin admin = args.admin();
                PulsarClient client = PulsarClient.builder().serviceUrl(args.str("httpUrl"))
                        .operationTimeout(10, TimeUnit.SECONDS).build()) {
            admin.topics().createPartitionedTopic(partitioned, 2);
            for (String topic : List.of(plain, partitioned)) {
                try (Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("sub")
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
                        Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false).create()) {
                    for (int i = 0; i < 4; i++) {
                        producer.send(Util.bytes("m-" + i));
                    }
                    List<String> received = new ArrayList<>(Util.expect(consumer, 4));
                    received.sort(null);
                    seen.put(topic.equals(plain) ? "plain" : "partitioned", received);
                }
            }
            seen.put("partitions", client.getPartitionsForTopic(partitioned).get());
        }
        return seen;
    }
}
