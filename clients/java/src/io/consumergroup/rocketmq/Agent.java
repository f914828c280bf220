package io.consumergroup.rocketmq;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.rocketmq.common.message.MessageQueue;

/**
 * A client of the consumergroup-agent beside this pod (docs/protocol.md, "The agent HTTP API"). It is
 * safe for concurrent use: it holds nothing but an HttpClient, which is.
 */
final class Agent {
    /**
     * An assignment the agent serves. Generation 0 means consume nothing; reason then says why.
     * assignedTopics are the topics the operator assigns in the group, whether or not this pod has queues
     * of them; null when the agent does not report them (it cannot read the ConsumerGroup, or predates
     * the field) or cannot be reached.
     */
    record Assignment(long generation, List<MessageQueue> messageQueues, String reason, Set<String> assignedTopics) {
        /** What is in force when the agent cannot be reached: nothing. */
        static Assignment unreachable(Exception e) {
            return new Assignment(0, List.of(), "the agent cannot be reached: " + e, null);
        }
    }

    private final HttpClient http;
    private final URI base;
    /** The longest a request other than a long-poll may take: a hung agent counts as unreachable. */
    private final Duration requestTimeout;

    Agent(URI base, Duration requestTimeout) {
        this.base = base;
        this.requestTimeout = requestTimeout;
        // HTTP/1.1: the agent serves plain HTTP on localhost, with nothing to upgrade to.
        this.http = HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(requestTimeout)
            .build();
    }

    URI base() {
        return base;
    }

    /** The assignment in force. */
    Assignment current() throws IOException, InterruptedException {
        return assignment(send(HttpRequest.newBuilder(base.resolve("/v1/assignment")).timeout(requestTimeout).GET(),
            "GET /v1/assignment"));
    }

    /**
     * Waits up to wait (whole seconds) for an assignment whose generation is not after, and returns the
     * assignment in force then: the same generation when the wait ran out.
     */
    Assignment next(long after, Duration wait) throws IOException, InterruptedException {
        String path = "/v1/assignment?after=" + after + "&timeout=" + wait.toSeconds() + "s";
        return assignment(send(HttpRequest.newBuilder(base.resolve(path)).timeout(wait.plus(requestTimeout)).GET(),
            "GET " + path));
    }

    /** Acknowledges generation and returns the generation the Lease now acknowledges (at least it). */
    long ack(long generation) throws IOException, InterruptedException {
        Map<?, ?> body = object(send(HttpRequest.newBuilder(base.resolve("/v1/ack")).timeout(requestTimeout)
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString("{\"generation\":" + generation + "}")),
            "POST /v1/ack " + generation));
        return number(body.get("acked"), "acked");
    }

    private String send(HttpRequest.Builder req, String what) throws IOException, InterruptedException {
        HttpResponse<String> resp = http.send(req.build(), HttpResponse.BodyHandlers.ofString());
        if (resp.statusCode() != 200) {
            String message = resp.body();
            try {
                Object error = object(message).get("error");
                if (error instanceof String) {
                    message = (String) error;
                }
            } catch (IOException e) {
                // Not the agent's JSON error: report the body as it is.
            }
            throw new IOException(what + ": " + resp.statusCode() + " " + message);
        }
        return resp.body();
    }

    private static Assignment assignment(String body) throws IOException {
        Map<?, ?> m = object(body);
        List<MessageQueue> queues = new ArrayList<>();
        Object list = m.get("messageQueues");
        if (list != null && !(list instanceof List)) {
            throw new IOException("the agent's messageQueues is not a list: " + body);
        }
        if (list != null) {
            for (Object o : (List<?>) list) {
                if (!(o instanceof Map) || !(((Map<?, ?>) o).get("topic") instanceof String)
                    || !(((Map<?, ?>) o).get("brokerName") instanceof String)) {
                    throw new IOException("the agent sent a message queue without topic or brokerName: " + o);
                }
                Map<?, ?> q = (Map<?, ?>) o;
                long id = number(q.get("queueId"), "queueId");
                if (id < 0 || id > Integer.MAX_VALUE) {
                    throw new IOException("the agent sent queue id " + id);
                }
                queues.add(new MessageQueue((String) q.get("topic"), (String) q.get("brokerName"), (int) id));
            }
        }
        Set<String> assignedTopics = null;
        Object topics = m.get("assignedTopics");
        if (topics != null) {
            if (!(topics instanceof List)) {
                throw new IOException("the agent's assignedTopics is not a list: " + body);
            }
            Set<String> ts = new HashSet<>();
            for (Object t : (List<?>) topics) {
                if (!(t instanceof String)) {
                    throw new IOException("the agent's assignedTopics lists something other than a topic name: " + t);
                }
                ts.add((String) t);
            }
            assignedTopics = Set.copyOf(ts);
        }
        Object reason = m.get("reason");
        return new Assignment(number(m.get("generation"), "generation"), List.copyOf(queues),
            reason instanceof String ? (String) reason : "", assignedTopics);
    }

    private static Map<?, ?> object(String body) throws IOException {
        Object v;
        try {
            v = Json.parse(body);
        } catch (IllegalArgumentException e) {
            throw new IOException("the agent's response is not JSON: " + e.getMessage(), e);
        }
        if (!(v instanceof Map)) {
            throw new IOException("the agent's response is not a JSON object: " + body);
        }
        return (Map<?, ?>) v;
    }

    private static long number(Object v, String field) throws IOException {
        if (!(v instanceof Long)) {
            throw new IOException("the agent's " + field + " is not a whole number: " + v);
        }
        return (Long) v;
    }
}
