package dev.magnetar.compat;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;

/** Advertised listeners: a client that names one (`listenerName`) is sent to that listener's URL. */
final class Listeners {
    private Listeners() {
    }

    static void register(Map<String, Compat.Scenario> scenarios) {
        scenarios.put("listener_lookup", Listeners::lookup);
    }

    /**
     * A client of `serviceUrl` (pulsar:// or http://) naming `listenerName` produces and consumes three
     * messages; a lookup the broker refuses shows as the error of subscribe (after `timeoutMs` of retries).
     */
    private static Map<String, Object> lookup(Args args) throws Exception {
        String topic = args.topic();
        Map<String, Object> seen = new LinkedHashMap<>();
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args.str("serviceUrl"))
                .listenerName(args.str("listenerName"))
                .operationTimeout(args.integer("timeoutMs", 3000), TimeUnit.MILLISECONDS)
                .lookupTimeout(args.integer("timeoutMs", 3000), TimeUnit.MILLISECONDS).build()) {
            Consumer<byte[]> consumer;
            try {
                consumer = client.newConsumer().topic(topic).subscriptionName("sub")
                        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            } catch (Exception e) {
                seen.put("subscribeError", Util.describe(e));
                return seen;
            }
            try (consumer; Producer<byte[]> producer = client.newProducer().topic(topic).create()) {
                for (int i = 0; i < 3; i++) {
                    producer.send(Util.bytes("m-" + i));
                }
                List<String> received = Util.expect(consumer, 3);
                seen.put("received", received);
            }
        }
        return seen;
    }
}
