package io.consumergroup.rocketmq;

import java.io.IOException;
import java.net.URI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;

import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * An {@link AllocateMessageQueueStrategy} for RocketMQ push consumers that returns the queues the
 * consumergroup-operator assigned to this pod, as the consumergroup-agent beside it serves them
 * (docs/protocol.md, "Push consumer"). It needs nothing but the JDK and the rocketmq-client jar.
 *
 * <pre>{@code
 * OperatorAllocateStrategy strategy = new OperatorAllocateStrategy(Set.of("orders"));
 * consumer.setAllocateMessageQueueStrategy(strategy);
 * consumer.start();
 * strategy.start(() -> consumer.getDefaultMQPushConsumerImpl().getmQClientFactory().rebalanceImmediately());
 * }</pre>
 *
 * <p>RocketMQ's rebalance thread calls {@link #allocate} once per subscribed topic and applies the result
 * (drops the queues it no longer returns, starts the new ones) before it calls {@code allocate} again. So
 * when {@code allocate} is called for a topic, what it returned for that topic last time is in force. The
 * strategy acknowledges generation N to the agent once every operator-assigned topic has been allocated at
 * generation N or later and allocated again. Generation 0, or an agent that cannot be reached, gives no
 * queues: consume nothing.
 *
 * <p>A topic is the operator's when it is in the set given to the constructor, when the agent reports that
 * the operator assigns it ({@code assignedTopics}, which it reads from the ConsumerGroup: the group's
 * topics and, for a group that assigns it, its retry topic {@code %RETRY%<group>}), or when the assignment
 * gives this pod queues of it. Its queues are then exactly the operator's, even when this pod has none of
 * them. Any other topic goes to the fallback strategy.
 *
 * <p>RocketMQ rebalances every 20 s. {@link #start} runs a thread that long-polls the agent and, when a new
 * generation arrives, asks for rebalances every 200 ms until every topic has applied it and it is
 * acknowledged: a handoff takes two rounds, not two periods.
 *
 * <p>Thread safety: {@code allocate} runs on RocketMQ's rebalance thread and the watcher on its own. The
 * bookkeeping they share is guarded by this object's monitor, which is held for bookkeeping only and never
 * across an HTTP request, so neither thread waits on the agent for the other. An acknowledgement sent
 * twice or out of order is harmless: the agent keeps the highest. Give each consumer its own strategy:
 * the bookkeeping follows one consumer's rebalances.
 */
public final class OperatorAllocateStrategy implements AllocateMessageQueueStrategy, AutoCloseable {
    /** Where the agent listens by default: its -listen flag's default. */
    public static final URI DEFAULT_AGENT = URI.create("http://127.0.0.1:8089");

    /** The longest a request to the agent other than a long-poll may take before it counts as unreachable. */
    static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(5);
    /** How long one long-poll waits for a new generation. */
    static final Duration POLL_WAIT = Duration.ofSeconds(30);
    /** How often the watcher asks for a rebalance while a generation waits to be applied and acknowledged. */
    static final Duration NUDGE_EVERY = Duration.ofMillis(200);
    /** How long it asks before it leaves the rest to RocketMQ's own rebalances (and logs why). */
    static final Duration NUDGE_FOR = Duration.ofSeconds(30);
    /** How long the watcher waits before it asks an agent that could not be reached again. */
    static final Duration RETRY_AFTER = Duration.ofSeconds(1);

    private static final System.Logger LOG = System.getLogger(OperatorAllocateStrategy.class.getName());

    /** One allocate result: the generation it came from and the number of the fetch that read it. */
    private record Served(long generation, long fetch) {
    }

    /** An acknowledgement due: a generation, within one incarnation of the group. */
    private record Due(long generation, long incarnation) {
    }

    private final Set<String> topics;
    private final AllocateMessageQueueStrategy others;
    private final Agent agent;

    // Guarded by this.
    /** What allocate last returned for each topic. */
    private final Map<String, Served> served = new HashMap<>();
    /** What is in force for each topic: what allocate returned before its latest call. */
    private final Map<String, Served> applied = new HashMap<>();
    /**
     * The topics the agent last reported the operator assigns, for when it cannot be reached; null when it
     * did not report them.
     */
    private Set<String> operatorTopics;
    /** Numbers the fetches from the agent in the order they start. */
    private long fetches;
    /** The highest generation fetched, and the highest acknowledged, in this incarnation of the group. */
    private long highest;
    private long acked;
    /** Counts the times a lower generation showed the group was deleted and created again. */
    private long incarnation;
    private Thread watcher;
    private boolean closed;

    /**
     * A strategy for the consumer's subscribed topics that the operator assigns, talking to the agent at
     * {@link #DEFAULT_AGENT}. Topics the operator does not assign get no queues.
     */
    public OperatorAllocateStrategy(Set<String> topics) {
        this(topics, DEFAULT_AGENT, null);
    }

    /** As {@link #OperatorAllocateStrategy(Set)}, with the agent at agent (such as http://127.0.0.1:8089). */
    public OperatorAllocateStrategy(Set<String> topics, URI agent) {
        this(topics, agent, null);
    }

    /**
     * A strategy for topics, the consumer's subscribed topics that the group lists, talking to the agent
     * at agent. A subscribed topic not in topics is the operator's too when the agent reports that the
     * operator assigns it, as it does for the retry topic {@code %RETRY%<group>} RocketMQ subscribes a
     * clustering consumer to when the group discovers its topics from a name server; from its first
     * allocation on, acknowledgements wait for it as for topics. Topics the operator does not assign (a
     * retry topic of a group with static topics, or with {@code retryTopic: Ignore}) go to others (such as
     * {@code new AllocateMessageQueueAveragely()}); with others null they get no queues. Every topic in
     * topics must be one the consumer subscribes to: generations are acknowledged once all of them have
     * applied it.
     */
    public OperatorAllocateStrategy(Set<String> topics, URI agent, AllocateMessageQueueStrategy others) {
        if (topics == null || topics.isEmpty()) {
            throw new IllegalArgumentException("topics: name the subscribed topics the operator assigns");
        }
        this.topics = Set.copyOf(topics);
        this.agent = new Agent(Objects.requireNonNull(agent, "agent"), REQUEST_TIMEOUT);
        this.others = others;
    }

    @Override
    public String getName() {
        return "CONSUMERGROUP_OPERATOR";
    }

    /**
     * Returns the queues of mqAll (one topic's queues) that the operator's generation in force lists for
     * this pod; none for generation 0 or when the agent cannot be reached. Before it reads the agent, it
     * records that what it returned for this topic last time is in force, and acknowledges the generation
     * every topic has applied. It never throws: RocketMQ would skip applying the round.
     */
    @Override
    public List<MessageQueue> allocate(String consumerGroup, String currentCID, List<MessageQueue> mqAll, List<String> cidAll) {
        if (mqAll == null || mqAll.isEmpty()) {
            return new ArrayList<>();
        }
        String topic = mqAll.get(0).getTopic();
        Due due = applied(topic);
        if (due != null) {
            acknowledge(due);
        }
        long fetch = startFetch();
        Agent.Assignment a;
        boolean reachable = true;
        try {
            a = agent.current();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            a = Agent.Assignment.unreachable(e);
            reachable = false;
        } catch (IOException | RuntimeException e) {
            a = Agent.Assignment.unreachable(e);
            reachable = false;
        }
        if (!operators(topic, a, reachable)) {
            return others == null ? new ArrayList<>() : others.allocate(consumerGroup, currentCID, mqAll, cidAll);
        }
        if (a.generation() == 0) {
            LOG.log(System.Logger.Level.DEBUG, "No assignment in force for topic {0}: {1}; consuming none of its queues", topic, a.reason());
        }
        served(topic, fetch, a.generation());
        Set<MessageQueue> offered = new HashSet<>(mqAll);
        List<MessageQueue> mine = new ArrayList<>();
        for (MessageQueue mq : a.messageQueues()) {
            // This call is for one topic: the agent lists the pod's queues of every topic.
            if (offered.contains(mq)) {
                mine.add(mq);
            }
        }
        return mine;
    }

    /**
     * Starts a daemon thread that long-polls the agent and, when a generation arrives, runs rebalanceNow
     * every 200 ms until every topic has applied it and it is acknowledged (for at most 30 s). With a
     * push consumer, rebalanceNow is
     * {@code () -> consumer.getDefaultMQPushConsumerImpl().getmQClientFactory().rebalanceImmediately()}.
     */
    public void start(Runnable rebalanceNow) {
        Objects.requireNonNull(rebalanceNow, "rebalanceNow");
        synchronized (this) {
            if (closed || watcher != null) {
                throw new IllegalStateException(closed ? "closed" : "already started");
            }
            watcher = new Thread(() -> watch(rebalanceNow), "consumergroup-agent-watch");
            watcher.setDaemon(true);
            watcher.start();
        }
    }

    /** Stops the thread {@link #start} started. allocate goes on answering from the agent. */
    @Override
    public void close() {
        Thread w;
        synchronized (this) {
            closed = true;
            w = watcher;
        }
        if (w != null) {
            w.interrupt();
            try {
                w.join(REQUEST_TIMEOUT.toMillis());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * Whether the operator assigns topic, by a: a topic of the constructor's set, one the agent reports the
     * operator assigns, or one the assignment gives this pod queues of. With the agent unreachable, what
     * it reported last decides. A topic that is not (any longer) the operator's stops holding back
     * acknowledgements.
     */
    private synchronized boolean operators(String topic, Agent.Assignment a, boolean reachable) {
        if (reachable) {
            operatorTopics = a.assignedTopics();
        }
        boolean ours = topics.contains(topic) || (operatorTopics != null && operatorTopics.contains(topic));
        for (MessageQueue mq : a.messageQueues()) {
            ours = ours || mq.getTopic().equals(topic);
        }
        if (!ours) {
            served.remove(topic);
            applied.remove(topic);
        }
        return ours;
    }

    /**
     * The topics acknowledgements wait for: those of the constructor's set, and those the operator
     * assigns that allocate has been called for. RocketMQ calls allocate for a subscribed topic only once
     * it has a route, so a retry topic that does not exist yet holds nothing back. Guarded by this.
     */
    private Set<String> required() {
        Set<String> all = new HashSet<>(topics);
        all.addAll(served.keySet());
        return all;
    }

    /**
     * Records that what allocate last returned for topic is in force, and returns the acknowledgement
     * now due, if any: the lowest generation in force across the topics, once every topic has one.
     */
    private synchronized Due applied(String topic) {
        Served s = served.get(topic);
        if (s != null) {
            applied.put(topic, s);
        }
        long min = Long.MAX_VALUE;
        for (String t : required()) {
            Served a = applied.get(t);
            if (a == null) {
                return null;
            }
            min = Math.min(min, a.generation());
        }
        return min > acked ? new Due(min, incarnation) : null;
    }

    private void acknowledge(Due due) {
        try {
            agent.ack(due.generation());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return;
        } catch (IOException | RuntimeException e) {
            // The operator waits for it; the next rebalance, which the watcher asks for, sends it again.
            LOG.log(System.Logger.Level.WARNING, "Failed to acknowledge generation {0}; the next rebalance retries: {1}", due.generation(), e.getMessage());
            return;
        }
        synchronized (this) {
            if (due.incarnation() == incarnation && due.generation() > acked) {
                acked = due.generation();
            }
        }
        LOG.log(System.Logger.Level.INFO, "Acknowledged generation {0}", due.generation());
    }

    private synchronized long startFetch() {
        return ++fetches;
    }

    private synchronized long fetchesStarted() {
        return fetches;
    }

    private synchronized void served(String topic, long fetch, long generation) {
        if (generation > 0 && generation < highest) {
            // Generations only grow within a group; a lower one is a group deleted and created again. What
            // is in force on the other topics came from the old group: it must be allocated again.
            LOG.log(System.Logger.Level.INFO, "Generation {0} after {1}: the group was created again", generation, highest);
            served.clear();
            applied.clear();
            highest = 0;
            acked = 0;
            incarnation++;
        }
        highest = Math.max(highest, generation);
        served.put(topic, new Served(generation, fetch));
    }

    /**
     * The topics that have not yet applied a result read by a fetch after the fetch numbered since, or,
     * when all have, the acknowledgement still due; empty once there is nothing left to do.
     */
    private synchronized Set<String> lagging(long since) {
        Set<String> lag = new TreeSet<>();
        long min = Long.MAX_VALUE;
        for (String t : required()) {
            Served a = applied.get(t);
            if (a == null || a.fetch() <= since) {
                lag.add(t);
            } else {
                min = Math.min(min, a.generation());
            }
        }
        if (lag.isEmpty() && min > acked) {
            lag.add("(acknowledgement of generation " + min + ")");
        }
        return lag;
    }

    /** Whether any topic has a generation in force, or about to be, other than 0. */
    private synchronized boolean holdsAny() {
        for (Served s : served.values()) {
            if (s.generation() != 0) {
                return true;
            }
        }
        for (Served s : applied.values()) {
            if (s.generation() != 0) {
                return true;
            }
        }
        return false;
    }

    private synchronized boolean isClosed() {
        return closed;
    }

    private void watch(Runnable rebalanceNow) {
        long held = 0;
        boolean reported = false;
        while (!isClosed()) {
            long generation;
            boolean reachable = true;
            try {
                generation = agent.next(held, POLL_WAIT).generation();
                reported = false;
            } catch (InterruptedException e) {
                return;
            } catch (IOException | RuntimeException e) {
                // allocate gives no queues while the agent cannot be reached: a rebalance applies that.
                generation = 0;
                reachable = false;
                if (!reported) {
                    LOG.log(System.Logger.Level.WARNING, "Cannot reach the consumergroup-agent at {0}; consuming nothing until it answers: {1}", agent.base(), e.getMessage());
                    reported = true;
                }
            }
            if (generation != held || (generation == 0 && holdsAny())) {
                held = generation;
                // Fetches from here on read this generation or a newer one.
                if (!nudge(rebalanceNow, fetchesStarted(), generation)) {
                    return;
                }
            }
            if (!reachable && !sleep(RETRY_AFTER)) {
                return;
            }
        }
    }

    /**
     * Runs rebalanceNow every NUDGE_EVERY until every topic has applied a result fetched after the fetch
     * numbered since and what that makes due is acknowledged, or NUDGE_FOR has passed. Returns false when
     * interrupted.
     */
    private boolean nudge(Runnable rebalanceNow, long since, long generation) {
        long deadline = System.nanoTime() + NUDGE_FOR.toNanos();
        while (!isClosed()) {
            Set<String> lag = lagging(since);
            if (lag.isEmpty()) {
                return true;
            }
            if (System.nanoTime() - deadline > 0) {
                LOG.log(System.Logger.Level.WARNING, "Generation {0} is not applied and acknowledged after {1} s of rebalances; waiting for: {2}. "
                    + "Are these topics subscribed, and does RocketMQ find their routes?", generation, NUDGE_FOR.toSeconds(), lag);
                return true;
            }
            try {
                rebalanceNow.run();
            } catch (RuntimeException e) {
                LOG.log(System.Logger.Level.WARNING, "Failed to start a rebalance: {0}", e.toString());
            }
            if (!sleep(NUDGE_EVERY)) {
                return false;
            }
        }
        return false;
    }

    private static boolean sleep(Duration d) {
        try {
            Thread.sleep(d.toMillis());
            return true;
        } catch (InterruptedException e) {
            return false;
        }
    }
}
