package dev.magnetar.compat;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;

/** A scenario's request: the broker's URLs, names and options, and the clients built from them. */
final class Args {
    private final JsonNode request;

    Args(JsonNode request) {
        this.request = request;
    }

    String str(String name) {
        JsonNode value = request.get(name);
        if (value == null || value.isNull()) {
            throw new IllegalArgumentException("missing argument " + name);
        }
        return value.asText();
    }

    String str(String name, String otherwise) {
        return request.hasNonNull(name) ? request.get(name).asText() : otherwise;
    }

    int integer(String name, int otherwise) {
        return request.hasNonNull(name) ? request.get(name).asInt() : otherwise;
    }

    boolean flag(String name) {
        return request.path(name).asBoolean(false);
    }

    String topic() {
        return str("topic");
    }

    /** A client of the broker under test; the scenario closes it (try-with-resources). */
    PulsarClient client() throws PulsarClientException {
        return PulsarClient.builder()
                .serviceUrl(str("serviceUrl"))
                .operationTimeout(10, TimeUnit.SECONDS)
                .build();
    }

    PulsarAdmin admin() throws PulsarClientException {
        return PulsarAdmin.builder()
                .serviceHttpUrl(str("httpUrl"))
                .requestTimeout(10, TimeUnit.SECONDS)
                .build();
    }
}
