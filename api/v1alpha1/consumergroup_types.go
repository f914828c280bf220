package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Annotations the operator reads on member pods. The keys of the objects it writes for the pods to read
// belong to the member protocol, in pkg/protocol.
const (
	// ZoneAnnotation on a pod overrides the zone taken from its node's topology.kubernetes.io/zone label.
	ZoneAnnotation = "messaging.consumergroup.io/zone"
	// WeightAnnotation on a pod sets its weight for weight-aware strategies: a whole number from 1 to 1000.
	WeightAnnotation = "messaging.consumergroup.io/weight"
)

// MessageModel says whether the group's members share the queues or each read all of them.
// +kubebuilder:validation:Enum=Clustering;Broadcasting
type MessageModel string

const (
	// Clustering gives every queue to exactly one member.
	Clustering MessageModel = "Clustering"
	// Broadcasting gives every queue to every member.
	Broadcasting MessageModel = "Broadcasting"
)

// StrategyType names an allocation strategy.
// +kubebuilder:validation:Enum=Averagely;AveragelyByCircle;ConsistentHash;MachineRoomNearby;ByMachineRoom;ByConfig;Sticky
type StrategyType string

// The strategy types, named as pkg/allocate's registry names them (a test in controllers checks that each
// is one); each is documented in docs/strategies.md.
const (
	Averagely         = StrategyType("Averagely")
	AveragelyByCircle = StrategyType("AveragelyByCircle")
	ConsistentHash    = StrategyType("ConsistentHash")
	MachineRoomNearby = StrategyType("MachineRoomNearby")
	ByMachineRoom     = StrategyType("ByMachineRoom")
	ByConfig          = StrategyType("ByConfig")
	Sticky            = StrategyType("Sticky")
)

// InnerStrategyType names a strategy MachineRoomNearby may apply inside each machine room.
// +kubebuilder:validation:Enum=Averagely;AveragelyByCircle;ConsistentHash;Sticky
type InnerStrategyType string

// ConsumerGroupSpec is the desired state of a ConsumerGroup.
// +kubebuilder:validation:XValidation:rule="has(self.selector.matchLabels) || has(self.selector.matchExpressions)",message="spec.selector: set matchLabels or matchExpressions; an empty selector would select every pod in the namespace"
// +kubebuilder:validation:XValidation:rule="self.messageModel != 'Broadcasting' || self.strategy.type != 'ByConfig'",message="spec.strategy.type: ByConfig cannot be used with messageModel Broadcasting"
// +kubebuilder:validation:XValidation:rule="!has(self.topics) || has(self.nameServer) || self.topics.all(t, has(t.brokers))",message="spec.topics[].brokers: a topic without brokers is discovered from spec.nameServer, which is not set; list its brokers or set spec.nameServer"
type ConsumerGroupSpec struct {
	// selector selects the member pods, in the group's namespace. A pod is a member while it is Running,
	// Ready and not being deleted.
	// +required
	Selector metav1.LabelSelector `json:"selector"`

	// messageModel is Clustering (each queue has one owner) or Broadcasting (every member gets every queue).
	// +optional
	// +kubebuilder:default=Clustering
	MessageModel MessageModel `json:"messageModel,omitempty"`

	// topics lists the topics the group consumes and their queues. A topic that lists brokers is static: its
	// queues are as written. A topic without brokers is discovered: its brokers and readable queues are read
	// from spec.nameServer (docs/nameserver.md).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Topics []Topic `json:"topics,omitempty"`

	// strategy chooses how queues are spread over the members, with its parameters.
	// +optional
	// +kubebuilder:default={type: Averagely}
	Strategy Strategy `json:"strategy,omitzero"`

	// handoff says how a queue moves from one member to another.
	// +optional
	// +kubebuilder:default={mode: Cooperative}
	Handoff Handoff `json:"handoff,omitzero"`

	// memberIdentity says what identifies a member: its pod name (the default) or the value of a pod
	// annotation, such as a RocketMQ client id.
	// +optional
	// +kubebuilder:default={podName: {}}
	MemberIdentity MemberIdentity `json:"memberIdentity,omitzero"`

	// paused freezes the published assignment, for an incident: while it is true the operator publishes
	// nothing new. Members keep the queues they have, a new member gets none, and the queues of a member
	// that left wait for it. The Paused condition says so. `kubectl cg pause` and `kubectl cg resume` set it.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// nameServer names the RocketMQ name servers from which the routes of the topics that list no brokers
	// are read, and refreshed every refreshIntervalSeconds.
	// +optional
	NameServer *NameServer `json:"nameServer,omitempty"`

	// autoscaling has the operator recommend how many members the group needs for the load they report
	// (status.recommendedMembers, and the metric consumergroup_recommended_members), for KEDA or an
	// HPA to scale the consumers by.
	// +optional
	Autoscaling *Autoscaling `json:"autoscaling,omitempty"`
}

// Autoscaling configures the recommended member count.
type Autoscaling struct {
	// targetLoadPerMember is the load one member should carry, in the unit members report load in
	// (docs/protocol.md, load reports), as a decimal number such as "250" or "12.5". The recommendation
	// is the total load over it, rounded up, from 1 to the number of queues; it goes down only once the
	// load is 10% below what the lower count could carry.
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="double(self) > 0.0",message="spec.autoscaling.targetLoadPerMember must be above 0"
	TargetLoadPerMember string `json:"targetLoadPerMember"`
}

// HandoffMode says whether a queue's new owner waits for the old owner to let go.
// +kubebuilder:validation:Enum=Cooperative;Immediate
type HandoffMode string

const (
	// Cooperative first publishes a generation in which the old owner no longer has the queue, and gives it
	// to the new owner only once no other member's claim in its Lease may still cover it: the old owner
	// acknowledged that generation, its Lease expired, its containers stopped, or it was fenced.
	Cooperative HandoffMode = "Cooperative"
	// Immediate publishes the new owner at once, as RocketMQ's clients do: for a moment both may read.
	Immediate HandoffMode = "Immediate"
)

// Handoff says how queues move between members. See docs/protocol.md.
type Handoff struct {
	// mode is Cooperative (the default) or Immediate.
	// +optional
	// +kubebuilder:default=Cooperative
	Mode HandoffMode `json:"mode,omitempty"`

	// revokeTimeoutSeconds is how long a member has to acknowledge that a queue was taken from it. A member
	// that has not by then, and still renews its Lease, is fenced: a Warning event and the Fenced condition
	// say so, and the queue goes to its new owner. A member that stopped renewing is waited for instead:
	// it stops reading on its own when its Lease runs out.
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	RevokeTimeoutSeconds *int32 `json:"revokeTimeoutSeconds,omitempty"`

	// restartGraceSeconds keeps a departed member's queues for it this long, so that a pod that returns
	// under the same member id (a restarted StatefulSet pod, the same client id) gets its own queues back
	// instead of having them spread over the others. Meanwhile nobody reads them. 0 disables it.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	RestartGraceSeconds *int32 `json:"restartGraceSeconds,omitempty"`
}

// Topic is one topic and the queues its brokers hold.
type Topic struct {
	// name is the topic's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	Name string `json:"name"`

	// brokers lists the brokers that hold queues of this topic. Without it, the topic's brokers and queues
	// are discovered from spec.nameServer.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	Brokers []Broker `json:"brokers,omitempty"`
}

// RetryTopicMode says whether a discovered group also assigns its retry topic.
// +kubebuilder:validation:Enum=Assign;Ignore
type RetryTopicMode string

const (
	// RetryTopicAssign assigns the group's retry topic, %RETRY%<groupName>, like a discovered topic.
	RetryTopicAssign RetryTopicMode = "Assign"
	// RetryTopicIgnore leaves the retry topic to the clients.
	RetryTopicIgnore RetryTopicMode = "Ignore"
)

// NameServer says where the routes of a group's discovered topics are read: RocketMQ name servers, asked
// GET_ROUTEINFO_BY_TOPIC. A group names a ClusterNameServer that an administrator set up; addresses and
// service name the name servers inline, which the operator honours only when its administrator turned
// inline name servers on (single-tenant clusters). See docs/nameserver.md.
// +kubebuilder:validation:XValidation:rule="[has(self.clusterNameServer), has(self.addresses), has(self.service)].filter(x, x).size() == 1",message="spec.nameServer: set exactly one of clusterNameServer, addresses or service"
// +kubebuilder:validation:XValidation:rule="!has(self.clusterNameServer) || (!has(self.credentialsSecret) && !has(self.refreshIntervalSeconds))",message="spec.nameServer: credentialsSecret and refreshIntervalSeconds belong to the ClusterNameServer; set them there"
type NameServer struct {
	// clusterNameServer names the ClusterNameServer to read the routes from; it must select the group's
	// namespace.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClusterNameServer string `json:"clusterNameServer,omitempty"`

	// addresses lists name servers as host:port, tried in turn.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=3
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:Pattern=`^[^\s/]+:[0-9]{1,5}$`
	Addresses []string `json:"addresses,omitempty"`

	// service names a Service in the group's namespace that reaches the name servers: the operator dials
	// <name>.<namespace>.svc:<port>, and tries each address the name resolves to (a headless Service
	// resolves to every name server).
	// +optional
	Service *NameServerService `json:"service,omitempty"`

	// credentialsSecret names a Secret in the group's namespace holding accessKey and secretKey (and
	// optionally securityToken), with which requests are signed for a name server that enforces ACLs.
	// Inline name servers only; the admission policy consumergroup-nameserver-credentials lets only a
	// requester who may read the Secret name it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CredentialsSecret string `json:"credentialsSecret,omitempty"`

	// refreshIntervalSeconds is how often the routes of inline name servers are read again (RocketMQ
	// clients' pollNameServerInterval); 30 when unset. A spec change reads them at once.
	// +optional
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=3600
	RefreshIntervalSeconds *int32 `json:"refreshIntervalSeconds,omitempty"`

	// groupName is the RocketMQ consumer group the members join; it names the retry topic. Defaults to
	// the ConsumerGroup's name.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	GroupName string `json:"groupName,omitempty"`

	// retryTopic is Assign (the default) to assign the group's retry topic %RETRY%<groupName>, discovered
	// like the other topics, or Ignore to leave it to the clients. A Broadcasting group has no retry topic.
	// +optional
	// +kubebuilder:default=Assign
	RetryTopic RetryTopicMode `json:"retryTopic,omitempty"`

	// brokerZones gives discovered brokers their zone (machine room), for the zone-aware strategies. A
	// broker it does not list whose name has the form <room>@<broker> is in zone <room>; any other has none.
	// +optional
	// +listType=map
	// +listMapKey=broker
	// +kubebuilder:validation:MaxItems=256
	BrokerZones []BrokerZone `json:"brokerZones,omitempty"`
}

// NameServerService is a Service that reaches the name servers.
type NameServerService struct {
	// name is the Service's name, in the group's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// port is the name servers' port.
	// +optional
	// +kubebuilder:default=9876
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// BrokerZone is the zone of one discovered broker.
type BrokerZone struct {
	// broker is the broker's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	Broker string `json:"broker"`

	// zone is the broker's zone.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Zone string `json:"zone"`
}

// Broker is one broker's share of a topic: queues 0 .. queues-1.
type Broker struct {
	// name is the broker's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	Name string `json:"name"`

	// queues is how many queues of the topic this broker holds, numbered from 0.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65536
	Queues int32 `json:"queues"`

	// zone is the broker's machine room, for zone-aware strategies.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Zone string `json:"zone,omitempty"`
}

// Strategy chooses an allocation strategy. Only the parameters of the chosen type may be set.
// +kubebuilder:validation:XValidation:rule="!has(self.consistentHash) || self.type == 'ConsistentHash'",message="spec.strategy.consistentHash may only be set when spec.strategy.type is ConsistentHash"
// +kubebuilder:validation:XValidation:rule="!has(self.machineRoomNearby) || self.type == 'MachineRoomNearby'",message="spec.strategy.machineRoomNearby may only be set when spec.strategy.type is MachineRoomNearby"
// +kubebuilder:validation:XValidation:rule="!has(self.byMachineRoom) || self.type == 'ByMachineRoom'",message="spec.strategy.byMachineRoom may only be set when spec.strategy.type is ByMachineRoom"
// +kubebuilder:validation:XValidation:rule="!has(self.byConfig) || self.type == 'ByConfig'",message="spec.strategy.byConfig may only be set when spec.strategy.type is ByConfig"
// +kubebuilder:validation:XValidation:rule="!has(self.sticky) || self.type == 'Sticky'",message="spec.strategy.sticky may only be set when spec.strategy.type is Sticky"
// +kubebuilder:validation:XValidation:rule="self.type != 'ByMachineRoom' || has(self.byMachineRoom)",message="spec.strategy.byMachineRoom is required when spec.strategy.type is ByMachineRoom"
// +kubebuilder:validation:XValidation:rule="self.type != 'ByConfig' || has(self.byConfig)",message="spec.strategy.byConfig is required when spec.strategy.type is ByConfig"
type Strategy struct {
	// type is the strategy: Averagely, AveragelyByCircle, ConsistentHash, MachineRoomNearby,
	// ByMachineRoom, ByConfig or Sticky.
	// +required
	Type StrategyType `json:"type"`

	// consistentHash holds ConsistentHash's parameters.
	// +optional
	ConsistentHash *ConsistentHashParameters `json:"consistentHash,omitempty"`

	// machineRoomNearby holds MachineRoomNearby's parameters.
	// +optional
	MachineRoomNearby *MachineRoomNearbyParameters `json:"machineRoomNearby,omitempty"`

	// byMachineRoom holds ByMachineRoom's parameters.
	// +optional
	ByMachineRoom *ByMachineRoomParameters `json:"byMachineRoom,omitempty"`

	// byConfig holds ByConfig's parameters.
	// +optional
	ByConfig *ByConfigParameters `json:"byConfig,omitempty"`

	// sticky holds Sticky's parameters.
	// +optional
	Sticky *StickyParameters `json:"sticky,omitempty"`
}

// ConsistentHashParameters are ConsistentHash's parameters.
type ConsistentHashParameters struct {
	// virtualNodes is the number of ring points per member.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	VirtualNodes *int32 `json:"virtualNodes,omitempty"`
}

// MachineRoomNearbyParameters are MachineRoomNearby's parameters: the strategy applied inside each
// machine room. A member's room is its zone; a broker's room is spec.topics[].brokers[].zone.
// +kubebuilder:validation:XValidation:rule="!has(self.consistentHash) || self.inner == 'ConsistentHash'",message="spec.strategy.machineRoomNearby.consistentHash may only be set when spec.strategy.machineRoomNearby.inner is ConsistentHash"
type MachineRoomNearbyParameters struct {
	// inner is the strategy applied inside each machine room.
	// +optional
	// +kubebuilder:default=Averagely
	Inner InnerStrategyType `json:"inner,omitempty"`

	// consistentHash holds the inner ConsistentHash's parameters.
	// +optional
	ConsistentHash *ConsistentHashParameters `json:"consistentHash,omitempty"`
}

// ByMachineRoomParameters are ByMachineRoom's parameters.
type ByMachineRoomParameters struct {
	// machineRooms lists the data-centre names whose brokers ("<room>@<broker>") the group consumes.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	MachineRooms []string `json:"machineRooms"`
}

// ByConfigParameters are ByConfig's parameters: an explicit list of queues per member.
type ByConfigParameters struct {
	// assignments lists, for each member id, the queues it reads.
	// +required
	// +listType=map
	// +listMapKey=member
	// +kubebuilder:validation:MaxItems=1024
	Assignments []MemberAssignment `json:"assignments"`
}

// MemberAssignment is one member's configured queues.
type MemberAssignment struct {
	// member is the member id.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Member string `json:"member"`

	// queues lists the member's queues.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4096
	Queues []QueueReference `json:"queues"`
}

// QueueReference names one queue.
type QueueReference struct {
	// topic is the queue's topic.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	Topic string `json:"topic"`

	// broker is the queue's broker.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	Broker string `json:"broker"`

	// queueId is the queue's number on its broker.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	QueueID int32 `json:"queueId"`
}

// StickyParameters are Sticky's parameters.
// +kubebuilder:validation:XValidation:rule="!(has(self.maxSkew) && self.maxSkew > 0 && has(self.balanceBy) && self.balanceBy == 'Load')",message="spec.strategy.sticky.maxSkew applies to balanceBy Queues only: with balanceBy Load a queue stays in its broker's zone while that zone's members stay within the load tolerance"
// +kubebuilder:validation:XValidation:rule="!(has(self.zoneRepairMoves) && self.zoneRepairMoves > 0 && ((has(self.maxSkew) && self.maxSkew > 0) || (has(self.balanceBy) && self.balanceBy == 'Load')))",message="spec.strategy.sticky.zoneRepairMoves applies to balanceBy Queues with maxSkew 0 only: set it to 0 or leave it out"
type StickyParameters struct {
	// maxSkew lets a member hold up to maxSkew queues more than its fair share when that keeps a queue in
	// its broker's zone. 0 keeps strict balance.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	MaxSkew *int32 `json:"maxSkew,omitempty"`

	// zoneRepairMoves is the most queues one rebalance moves beyond those balance forces, to bring the
	// queues read outside their broker's zone down to the fewest a balanced plan allows; 0 moves none.
	// Queues that move anyway go to their broker's zone whatever it is. Unset means 8, or 0 when
	// spec.handoff.restartGraceSeconds is above 0: a pod that comes back then gets its own queues back
	// and keeps them, in whatever zone it came back. It applies with balanceBy Queues and maxSkew 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	ZoneRepairMoves *int32 `json:"zoneRepairMoves,omitempty"`

	// balanceBy is what Sticky balances: Queues, the number of queues each member reads (weighted), or
	// Load, the load members report per queue through their Leases (docs/protocol.md, load reports). A
	// queue nobody reports counts at the mean reported load. maxSkew applies to Queues only.
	// +optional
	// +kubebuilder:default=Queues
	BalanceBy BalanceBy `json:"balanceBy,omitempty"`

	// loadTolerancePercent is how far above its weighted fair share of the load a member may go before
	// queues move, with balanceBy Load. Sticky aims for every member to carry at most
	// max((1 + tolerance) * its share, the load of the hottest queue it holds), and guarantees at most
	// max((1 + tolerance) * its share, its share plus that load): queues are indivisible.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	LoadTolerancePercent *int32 `json:"loadTolerancePercent,omitempty"`

	// loadRebalanceIntervalSeconds is the least time between two rebalances that only load changes cause,
	// with balanceBy Load; a change of members or queues replans at once.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	LoadRebalanceIntervalSeconds *int32 `json:"loadRebalanceIntervalSeconds,omitempty"`
}

// BalanceBy is what Sticky balances.
// +kubebuilder:validation:Enum=Queues;Load
type BalanceBy string

// The quantities Sticky balances.
const (
	BalanceByQueues = BalanceBy("Queues")
	BalanceByLoad   = BalanceBy("Load")
)

// MemberIdentity says what identifies a member: the pod name unless annotation is set.
// +kubebuilder:validation:XValidation:rule="!(has(self.podName) && has(self.annotation))",message="spec.memberIdentity: set at most one of podName or annotation"
type MemberIdentity struct {
	// podName identifies each member by its pod name.
	// +optional
	PodName *PodNameIdentity `json:"podName,omitempty"`

	// annotation identifies each member by the value of this pod annotation, for example a RocketMQ
	// client id. A member pod without it makes the group Degraded.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	Annotation *string `json:"annotation,omitempty"`
}

// PodNameIdentity selects the pod name as member id. It has no fields.
type PodNameIdentity struct{}

// ConsumerGroupStatus is what the operator last observed and published for a ConsumerGroup.
type ConsumerGroupStatus struct {
	// observedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// assignmentGeneration is the generation of the published assignment; it grows by one each time the
	// published plan changes.
	// +optional
	AssignmentGeneration int64 `json:"assignmentGeneration,omitempty"`

	// assignmentConfigMap is the name of the ConfigMap that publishes the assignment.
	// +optional
	AssignmentConfigMap string `json:"assignmentConfigMap,omitempty"`

	// memberCount is the number of members in the published assignment.
	// +optional
	MemberCount int32 `json:"memberCount,omitempty"`

	// queueCount is the number of queues in the published assignment.
	// +optional
	QueueCount int32 `json:"queueCount,omitempty"`

	// unownedQueues counts the queues the published assignment gives to no member: published to nobody
	// (no member), or revoked and not yet granted (a handoff waiting for an acknowledgement). Nobody reads
	// them.
	// +optional
	UnownedQueues int32 `json:"unownedQueues"`

	// members summarises the published assignment per member, sorted by member id. It lists at most
	// 4096 members, so that the status of a very large group still fits the object; memberCount counts
	// them all, and the assignment ConfigMap lists every member.
	// +optional
	// +listType=map
	// +listMapKey=id
	// +kubebuilder:validation:MaxItems=4096
	Members []MemberStatus `json:"members,omitempty"`

	// lastRebalanceTime is when the published plan last changed.
	// +optional
	LastRebalanceTime *metav1.Time `json:"lastRebalanceTime,omitempty"`

	// recommendedMembers is how many members the reported load needs, with spec.autoscaling set.
	// +optional
	RecommendedMembers *int32 `json:"recommendedMembers,omitempty"`

	// totalLoad is the load the members report for all the group's queues (a queue nobody reports counts
	// at the mean), as a decimal number; empty when nobody reports load.
	// +optional
	TotalLoad string `json:"totalLoad,omitempty"`

	// routes are the routes of the discovered topics as last read from spec.nameServer: they stay in force
	// while the name servers cannot be read.
	// +optional
	Routes *RoutesStatus `json:"routes,omitempty"`

	// conditions: Ready (the published assignment matches the spec and the current members), Degraded
	// (the operator cannot compute a new assignment; the last good one stays published), Progressing (a
	// cooperative handoff is in flight: some queues wait for their old reader to let go), Fenced (a
	// member did not acknowledge a revocation in time while it kept renewing its Lease, and its queues
	// were handed on), Tampered (the objects the operator wrote, or a member's claim, were deleted or
	// edited; queues nobody claims are held back until every member caught up), Reconciling and Stalled
	// (kstatus: on its way to what the spec and the members ask, or unable to get there until someone
	// changes the spec or the pods), Paused (spec.paused freezes the published assignment) and
	// TopologyStale (the last read of the name servers failed; the routes read before stay in force).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RoutesStatus are the routes last read from the name servers.
type RoutesStatus struct {
	// observedGeneration is the spec generation of the last refresh that reached a name server.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// readTime is when a read that reached every discovered topic last found the routes changed (or
	// first read them). A read that finds nothing changed writes nothing: the metric
	// consumergroup_routes_last_read_timestamp_seconds dates the last read.
	// +optional
	ReadTime *metav1.Time `json:"readTime,omitempty"`

	// nameServer is the address that last answered.
	// +optional
	NameServer string `json:"nameServer,omitempty"`

	// topics are the discovered topics' routes, retry topic included.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=257
	Topics []TopicRoute `json:"topics,omitempty"`
}

// TopicRoute is one discovered topic's route.
type TopicRoute struct {
	// name is the topic's name.
	// +required
	Name string `json:"name"`

	// brokers are the brokers the name server lists for the topic; the topic's queues are those they
	// hold readable.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Brokers []BrokerRoute `json:"brokers,omitempty"`

	// readTime is when the topic's route was read as it stands: the read that last changed it.
	// +optional
	ReadTime *metav1.Time `json:"readTime,omitempty"`

	// absentSince is when the name servers began to answer that the topic does not exist. Its brokers
	// stay in force until they have answered so for three refresh intervals.
	// +optional
	AbsentSince *metav1.Time `json:"absentSince,omitempty"`
}

// BrokerRoute is one broker's part of a topic's route.
type BrokerRoute struct {
	// name is the broker's name.
	// +required
	Name string `json:"name"`

	// queues is how many of the broker's queues the group reads: readQueueNums when perm lets the topic be
	// read, 0 otherwise.
	// +required
	Queues int32 `json:"queues"`

	// readQueueNums is the broker's read queue count, as the name server reports it.
	// +optional
	ReadQueueNums int32 `json:"readQueueNums,omitempty"`

	// perm is the broker's permission bits for the topic (4 read, 2 write, 1 inherit).
	// +optional
	Perm int32 `json:"perm,omitempty"`

	// zone is the broker's zone, from the group's or the ClusterNameServer's brokerZones or the broker's
	// name (<room>@<broker>); empty for none.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Zone string `json:"zone,omitempty"`
}

// MemberStatus is one member's line in the status.
type MemberStatus struct {
	// id is the member id.
	// +required
	ID string `json:"id"`

	// pod is the member's pod name.
	// +required
	Pod string `json:"pod"`

	// queues is how many queues the member holds.
	// +required
	Queues int32 `json:"queues"`

	// ackedGeneration is the last assignment generation the member acknowledged through its Lease; absent
	// when it keeps no Lease.
	// +optional
	AckedGeneration *int64 `json:"ackedGeneration,omitempty"`
}

// ConsumerGroup says which pods consume a set of message queues and how the queues are spread over them.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cg,categories=messaging
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.strategy.type`
// +kubebuilder:printcolumn:name="Members",type=integer,JSONPath=`.status.memberCount`
// +kubebuilder:printcolumn:name="Queues",type=integer,JSONPath=`.status.queueCount`
// +kubebuilder:printcolumn:name="Unowned",type=integer,JSONPath=`.status.unownedQueues`,priority=1
// +kubebuilder:printcolumn:name="Generation",type=integer,JSONPath=`.status.assignmentGeneration`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Handoff",type=string,JSONPath=`.status.conditions[?(@.type=="Progressing")].status`,priority=1
// +kubebuilder:printcolumn:name="Recommended",type=integer,JSONPath=`.status.recommendedMembers`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ConsumerGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state.
	// +required
	Spec ConsumerGroupSpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status ConsumerGroupStatus `json:"status,omitempty"`
}

// ConsumerGroupList is a list of ConsumerGroups.
// +kubebuilder:object:root=true
type ConsumerGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ConsumerGroup `json:"items"`
}
