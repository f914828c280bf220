package io.consumergroup.rocketmq;

import java.io.InputStream;
import java.net.URI;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Stands in for RocketMQ's RebalanceService and a push consumer's RebalanceImpl, for clients/java's Go
 * test: one thread that, round after round, calls {@code allocate} for each subscribed topic with all its
 * queues, sorted, and applies the result before it goes on, as RocketMQ does. A round runs at start, when
 * {@code rebalanceNow} wakes it (RocketMQ's rebalanceImmediately), or when the interval (RocketMQ's 20 s)
 * passes without one, and never sooner than the minimum interval after the last (RocketMQ 5's
 * rocketmq.client.rebalance.minInterval, 1 s).
 *
 * <p>Each time the queues it holds change, it prints one JSON line to stdout:
 * {@code {"at":<µs since the epoch>,"cause":"start|woken|timer","holding":["orders/broker-a/0",...]}}.
 * A result that is not a subset of the queues offered prints {@code {"error":"..."}} and exits with 1. It
 * exits when stdin closes.
 *
 * <pre>
 * java io.consumergroup.rocketmq.RebalanceDriver --agent=http://127.0.0.1:8089 --group=orders --cid=pod-0 \
 *     [--interval=20s] [--min-interval=1s] --topic=orders:broker-a=4,broker-b=4 [--topic=...] \
 *     [--other-topic=%RETRY%orders:broker-a=1]
 * </pre>
 *
 * {@code --topic} names a topic given to the strategy as one the operator assigns; {@code --other-topic} a
 * subscribed topic that is not, such as the retry topic: the strategy takes its queues from the operator
 * when the agent reports the operator assigns it, and otherwise hands it to a stand-in for
 * AllocateMessageQueueAveragely with this one consumer, which gives it all its queues.
 */
public final class RebalanceDriver {
    private final String group;
    private final String cid;
    private final Duration interval;
    private final Duration minInterval;
    /** Every subscribed topic's queues, sorted, in subscription order. */
    private final Map<String, List<MessageQueue>> subscriptions;
    private final OperatorAllocateStrategy strategy;

    /** What each topic's last applied result holds. Only the rebalance thread touches it. */
    private final Map<String, Set<MessageQueue>> holding = new LinkedHashMap<>();

    // Guarded by this: the wake-up, as RocketMQ's ServiceThread keeps it.
    private boolean woken;

    private RebalanceDriver(String group, String cid, Duration interval, Duration minInterval,
                            Map<String, List<MessageQueue>> subscriptions, OperatorAllocateStrategy strategy) {
        this.group = group;
        this.cid = cid;
        this.interval = interval;
        this.minInterval = minInterval;
        this.subscriptions = subscriptions;
        this.strategy = strategy;
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> flags = new LinkedHashMap<>();
        Map<String, List<MessageQueue>> subscriptions = new LinkedHashMap<>();
        Set<String> assigned = new LinkedHashSet<>();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            if (!arg.startsWith("--") || eq < 0) {
                usage("bad argument " + arg);
            }
            String name = arg.substring(2, eq);
            String value = arg.substring(eq + 1);
            switch (name) {
                case "topic", "other-topic" -> {
                    int colon = value.lastIndexOf(':');
                    if (colon <= 0) {
                        usage("--" + name + "=TOPIC:BROKER=QUEUES,...: " + value);
                    }
                    String topic = value.substring(0, colon);
                    subscriptions.put(topic, queues(topic, value.substring(colon + 1)));
                    if (name.equals("topic")) {
                        assigned.add(topic);
                    }
                }
                case "agent", "group", "cid", "interval", "min-interval" -> flags.put(name, value);
                default -> usage("unknown flag --" + name);
            }
        }
        for (String required : List.of("agent", "group", "cid")) {
            if (!flags.containsKey(required)) {
                usage("--" + required + " is required");
            }
        }
        if (assigned.isEmpty()) {
            usage("at least one --topic is required");
        }
        OperatorAllocateStrategy strategy = new OperatorAllocateStrategy(assigned, URI.create(flags.get("agent")), new AllOfThem());
        RebalanceDriver d = new RebalanceDriver(flags.get("group"), flags.get("cid"),
            Duration.parse("PT" + flags.getOrDefault("interval", "20s")),
            Duration.parse("PT" + flags.getOrDefault("min-interval", "1s")), subscriptions, strategy);

        Thread rebalancer = new Thread(d::run, "RebalanceService");
        rebalancer.setDaemon(true);
        rebalancer.start();
        strategy.start(d::wakeup);

        // Run until the test closes stdin.
        InputStream in = System.in;
        byte[] buf = new byte[256];
        while (in.read(buf) >= 0) {
            // Nothing is read from stdin; it only says when to stop.
        }
        strategy.close();
        System.exit(0);
    }

    /** Parses BROKER=QUEUES,... into the topic's queues, sorted as RocketMQ sorts mqAll. */
    private static List<MessageQueue> queues(String topic, String spec) {
        Set<MessageQueue> qs = new TreeSet<>();
        for (String broker : spec.split(",")) {
            String[] kv = broker.split("=");
            if (kv.length != 2) {
                usage("broker " + broker + ": want BROKER=QUEUES");
            }
            int n = Integer.parseInt(kv[1]);
            for (int id = 0; id < n; id++) {
                qs.add(new MessageQueue(topic, kv[0], id));
            }
        }
        return List.copyOf(qs);
    }

    private static void usage(String problem) {
        System.err.println("RebalanceDriver: " + problem);
        System.err.println("usage: RebalanceDriver --agent=URL --group=G --cid=C [--interval=20s] [--min-interval=1s] "
            + "--topic=TOPIC:BROKER=QUEUES,... [--topic=...] [--other-topic=TOPIC:BROKER=QUEUES,...]");
        System.exit(2);
    }

    /** rebalanceNow: wakes the rebalance thread, or makes its next wait return at once. */
    private synchronized void wakeup() {
        woken = true;
        notifyAll();
    }

    /** Waits until woken or timeout passes; returns whether it was woken, and clears the wake-up. */
    private synchronized boolean waitForRunning(long timeoutMillis) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMillis;
        while (!woken) {
            long left = deadline - System.currentTimeMillis();
            if (left <= 0) {
                return false;
            }
            wait(left);
        }
        woken = false;
        return true;
    }

    private void run() {
        try {
            round("start");
            long last = System.currentTimeMillis();
            long wait = interval.toMillis();
            boolean wokenSinceLast = false;
            while (true) {
                wokenSinceLast |= waitForRunning(wait);
                long since = System.currentTimeMillis() - last;
                if (since < minInterval.toMillis()) {
                    wait = minInterval.toMillis() - since;
                    continue;
                }
                round(wokenSinceLast ? "woken" : "timer");
                last = System.currentTimeMillis();
                wait = interval.toMillis();
                wokenSinceLast = false;
            }
        } catch (InterruptedException e) {
            // Stopping.
        } catch (RuntimeException e) {
            fail("rebalance thread: " + e);
        }
    }

    /** One rebalance: for each topic, allocate, then apply the result before the next topic. */
    private void round(String cause) {
        List<String> cids = List.of(cid);
        for (Map.Entry<String, List<MessageQueue>> sub : subscriptions.entrySet()) {
            List<MessageQueue> mqAll = sub.getValue();
            List<MessageQueue> result = strategy.allocate(group, cid, new ArrayList<>(mqAll), new ArrayList<>(cids));
            Set<MessageQueue> next = new TreeSet<>(result);
            if (next.size() != result.size() || !mqAll.containsAll(next)) {
                fail("allocate for topic " + sub.getKey() + " returned " + result + ", which is not a set of its queues " + mqAll);
            }
            // Apply: hold exactly the result, as updateProcessQueueTableInRebalance does.
            Set<MessageQueue> before = holding.put(sub.getKey(), next);
            if (!next.equals(before == null ? Set.of() : before)) {
                print(cause);
            }
        }
    }

    private void print(String cause) {
        StringBuilder b = new StringBuilder();
        Instant now = Instant.now();
        b.append("{\"at\":").append(now.getEpochSecond() * 1_000_000 + now.getNano() / 1_000)
            .append(",\"cause\":\"").append(cause).append("\",\"holding\":[");
        String sep = "";
        for (Set<MessageQueue> qs : holding.values()) {
            for (MessageQueue q : qs) {
                b.append(sep).append(quote(q.getTopic() + "/" + q.getBrokerName() + "/" + q.getQueueId()));
                sep = ",";
            }
        }
        b.append("]}");
        synchronized (System.out) {
            System.out.println(b);
            System.out.flush();
        }
    }

    private static void fail(String message) {
        synchronized (System.out) {
            System.out.println("{\"error\":" + quote(message) + "}");
            System.out.flush();
        }
        System.exit(1);
    }

    private static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    /** AllocateMessageQueueAveragely with one consumer: every queue. */
    private static final class AllOfThem implements AllocateMessageQueueStrategy {
        @Override
        public List<MessageQueue> allocate(String consumerGroup, String currentCID, List<MessageQueue> mqAll, List<String> cidAll) {
            return new ArrayList<>(mqAll);
        }

        @Override
        public String getName() {
            return "AVG";
        }
    }
}
