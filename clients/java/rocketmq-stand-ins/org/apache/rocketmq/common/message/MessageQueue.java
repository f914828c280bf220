/*
 * A stand-in for RocketMQ's org.apache.rocketmq.common.message.MessageQueue, with its package name and
 * public signatures, compiled only so that io.consumergroup.rocketmq.OperatorAllocateStrategy can be
 * compiled and tested in this repository, where the RocketMQ client jar is not available. Applications
 * compile the strategy against the real rocketmq-client jar and never ship this class.
 */
package org.apache.rocketmq.common.message;

import java.io.Serializable;
import java.util.Objects;

/** One message queue: a topic's queue queueId on broker brokerName. */
public class MessageQueue implements Comparable<MessageQueue>, Serializable {
    private static final long serialVersionUID = 1L;

    private String topic;
    private String brokerName;
    private int queueId;

    public MessageQueue() {
    }

    public MessageQueue(String topic, String brokerName, int queueId) {
        this.topic = topic;
        this.brokerName = brokerName;
        this.queueId = queueId;
    }

    public String getTopic() {
        return topic;
    }

    public void setTopic(String topic) {
        this.topic = topic;
    }

    public String getBrokerName() {
        return brokerName;
    }

    public void setBrokerName(String brokerName) {
        this.brokerName = brokerName;
    }

    public int getQueueId() {
        return queueId;
    }

    public void setQueueId(int queueId) {
        this.queueId = queueId;
    }

    /** Equal queues have the same topic, broker name and queue id, as in RocketMQ. */
    @Override
    public boolean equals(Object o) {
        if (this == o) {
            return true;
        }
        if (o == null || getClass() != o.getClass()) {
            return false;
        }
        MessageQueue other = (MessageQueue) o;
        return queueId == other.queueId
            && Objects.equals(topic, other.topic)
            && Objects.equals(brokerName, other.brokerName);
    }

    @Override
    public int hashCode() {
        int h = 1;
        h = 31 * h + (brokerName == null ? 0 : brokerName.hashCode());
        h = 31 * h + queueId;
        h = 31 * h + (topic == null ? 0 : topic.hashCode());
        return h;
    }

    @Override
    public String toString() {
        return "MessageQueue [topic=" + topic + ", brokerName=" + brokerName + ", queueId=" + queueId + "]";
    }

    /** Orders by topic, then broker name, then queue id, as RocketMQ sorts mqAll before allocating. */
    @Override
    public int compareTo(MessageQueue o) {
        int c = topic.compareTo(o.topic);
        if (c != 0) {
            return c;
        }
        c = brokerName.compareTo(o.brokerName);
        if (c != 0) {
            return c;
        }
        return Integer.compare(queueId, o.queueId);
    }
}
