package dev.magnetar.compat;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Reader;

/** How scenarios describe what they saw: message ids as [ledger, entry, batch index, partition], errors by class. */
final class Util {
    private Util() {
    }

    static List<Long> id(MessageId id) {
        // A partitioned topic's ids (TopicMessageIdImpl) are MessageIdAdv too.
        MessageIdAdv adv = (MessageIdAdv) id;
        return List.of(adv.getLedgerId(), adv.getEntryId(), (long) adv.getBatchIndex(), (long) adv.getPartitionIndex());
    }

    static Map<String, Object> describe(Message<byte[]> message) {
        Map<String, Object> seen = new LinkedHashMap<>();
        seen.put("value", new String(message.getValue(), java.nio.charset.StandardCharsets.UTF_8));
        seen.put("key", message.getKey());
        seen.put("id", id(message.getMessageId()));
        seen.put("topic", message.getTopicName());
        seen.put("properties", message.getProperties());
        seen.put("redeliveryCount", message.getRedeliveryCount());
        seen.put("publishTime", message.getPublishTime());
        seen.put("producerName", message.getProducerName());
        return seen;
    }

    /** The exception a user sees: the client's own class (ProducerFencedException, ...), then its message. */
    static String describe(Throwable error) {
        while ((error instanceof ExecutionException || error instanceof CompletionException) && error.getCause() != null) {
            error = error.getCause();
        }
        return error.getClass().getSimpleName() + ": " + error.getMessage();
    }

    static String errorClass(Throwable error) {
        String described = describe(error);
        return described.substring(0, described.indexOf(':'));
    }

    /** Receive until `count` messages arrived or `timeoutMs` passed without one; values in arrival order. */
    static List<Message<byte[]>> receive(Consumer<byte[]> consumer, int count, int timeoutMs) throws PulsarClientException {
        List<Message<byte[]>> received = new ArrayList<>();
        while (received.size() < count) {
            Message<byte[]> message = consumer.receive(timeoutMs, TimeUnit.MILLISECONDS);
            if (message == null) {
                break;
            }
            received.add(message);
        }
        return received;
    }

    /**
     * The `count` values a test expects (waiting up to 5 s for each), then any further one that arrives
     * within 300 ms: an extra message shows up in the list instead of costing a long wait every run.
     */
    static List<String> expect(Consumer<byte[]> consumer, int count) throws PulsarClientException {
        List<Message<byte[]>> received = receive(consumer, count, 5000);
        if (received.size() == count) {
            received.addAll(receive(consumer, 1, 300));
        }
        return values(received);
    }

    static List<Message<byte[]>> read(Reader<byte[]> reader, int count, int timeoutMs) throws PulsarClientException {
        List<Message<byte[]>> received = new ArrayList<>();
        while (received.size() < count) {
            Message<byte[]> message = reader.readNext(timeoutMs, TimeUnit.MILLISECONDS);
            if (message == null) {
                break;
            }
            received.add(message);
        }
        return received;
    }

    static List<String> values(List<Message<byte[]>> messages) {
        List<String> values = new ArrayList<>();
        for (Message<byte[]> message : messages) {
            values.add(new String(message.getValue(), java.nio.charset.StandardCharsets.UTF_8));
        }
        return values;
    }

    static List<Map<String, Object>> describeAll(List<Message<byte[]>> messages) {
        List<Map<String, Object>> seen = new ArrayList<>();
        for (Message<byte[]> message : messages) {
            seen.add(describe(message));
        }
        return seen;
    }

    static byte[] bytes(String value) {
        return value.getBytes(java.nio.charset.StandardCharsets.UTF_8);
    }
}
