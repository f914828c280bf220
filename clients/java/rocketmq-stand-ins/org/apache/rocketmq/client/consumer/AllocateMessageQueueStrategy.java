/*
 * A stand-in for RocketMQ's org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy, with its
 * package name and signatures, compiled only so that io.consumergroup.rocketmq.OperatorAllocateStrategy
 * can be compiled and tested in this repository, where the RocketMQ client jar is not available.
 * Applications compile the strategy against the real rocketmq-client jar and never ship this interface.
 */
package org.apache.rocketmq.client.consumer;

import java.util.List;

import org.apache.rocketmq.common.message.MessageQueue;

/** Chooses the queues of one topic this consumer reads. */
public interface AllocateMessageQueueStrategy {
    /**
     * Returns the queues of mqAll (all the queues of one topic, sorted) that the consumer currentCID of
     * consumerGroup reads, given all the consumers of the group, cidAll (sorted).
     */
    List<MessageQueue> allocate(String consumerGroup, String currentCID, List<MessageQueue> mqAll, List<String> cidAll);

    /** The strategy's name. */
    String getName();
}
