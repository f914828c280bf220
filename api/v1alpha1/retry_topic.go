package v1alpha1

// RetryTopicPrefix names a RocketMQ consumer group's retry topic, %RETRY%<group>.
const RetryTopicPrefix = "%RETRY%"

// RetryTopic is the name of the group's retry topic when the operator assigns it, "" otherwise: a group
// with spec.nameServer that does not set retryTopic Ignore and does not broadcast assigns
// %RETRY%<groupName>, groupName defaulting to the group's name (docs/nameserver.md). The operator and the
// member agent both ask it, so that they agree on which topics the operator assigns.
func (g *ConsumerGroup) RetryTopic() string {
	ns := g.Spec.NameServer
	if ns == nil || ns.RetryTopic == RetryTopicIgnore || g.Spec.MessageModel == Broadcasting {
		return ""
	}
	name := ns.GroupName
	if name == "" {
		name = g.Name
	}
	return RetryTopicPrefix + name
}
