package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterNameServerSpec is a set of RocketMQ name servers an administrator lets ConsumerGroups read their
// routes from: where they are, how the operator reaches them, and which namespaces may use them. Only
// the administrator's resource says where the operator dials and with which credentials; a tenant's
// group only names it (spec.nameServer.clusterNameServer). See docs/nameserver.md.
// +kubebuilder:validation:XValidation:rule="has(self.addresses) != has(self.service)",message="spec: set exactly one of addresses or service"
// +kubebuilder:validation:XValidation:rule="!has(self.credentialsSecret) || has(self.tls) || (has(self.allowPlaintextCredentials) && self.allowPlaintextCredentials)",message="spec.credentialsSecret: credentials are sent over TLS only; set spec.tls, or spec.allowPlaintextCredentials to send them in clear"
type ClusterNameServerSpec struct {
	// addresses lists name servers as host:port, tried in turn.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=3
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:Pattern=`^[^\s/]+:[0-9]{1,5}$`
	Addresses []string `json:"addresses,omitempty"`

	// service names a Service that reaches the name servers: the operator dials
	// <name>.<namespace>.svc:<port>, and tries each address the name resolves to.
	// +optional
	Service *ClusterNameServerService `json:"service,omitempty"`

	// allowedDestinations are where the operator may connect: every address the name servers' names
	// resolve to is checked against them before it is dialled, so a name that comes to resolve elsewhere
	// is not followed. Loopback, link-local and the API server's addresses are refused unless a CIDR
	// within them is listed.
	// +required
	AllowedDestinations AllowedDestinations `json:"allowedDestinations"`

	// namespaceSelector selects the namespaces whose ConsumerGroups may use these name servers; {}
	// selects every namespace. A group elsewhere that names them is told it is not allowed, and nothing
	// is dialled for it.
	// +required
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`

	// credentialsSecret names a Secret in the operator's credentials namespace (the operator's own by
	// default) holding accessKey and secretKey (and optionally securityToken), with which requests are
	// signed for name servers that enforce ACLs. They are sent over TLS only, unless
	// allowPlaintextCredentials says otherwise.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CredentialsSecret string `json:"credentialsSecret,omitempty"`

	// allowPlaintextCredentials lets the credentials be sent to name servers without TLS, as RocketMQ's
	// ACL clients do by default; anybody on the path can then read the access key and replay signed
	// requests.
	// +optional
	AllowPlaintextCredentials bool `json:"allowPlaintextCredentials,omitempty"`

	// tls, when set, connects to the name servers over TLS.
	// +optional
	TLS *NameServerTLS `json:"tls,omitempty"`

	// refreshIntervalSeconds is how often the routes are read again (RocketMQ clients'
	// pollNameServerInterval); every group reading the same topic from these name servers shares each
	// read.
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=3600
	RefreshIntervalSeconds *int32 `json:"refreshIntervalSeconds,omitempty"`

	// brokerZones gives discovered brokers their zone (machine room), for the zone-aware strategies; a
	// group's own spec.nameServer.brokerZones come first.
	// +optional
	// +listType=map
	// +listMapKey=broker
	// +kubebuilder:validation:MaxItems=256
	BrokerZones []BrokerZone `json:"brokerZones,omitempty"`
}

// ClusterNameServerService is a Service that reaches the name servers.
type ClusterNameServerService struct {
	// namespace is the Service's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`

	// name is the Service's name.
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

// AllowedDestinations are the addresses and ports the operator may connect to.
type AllowedDestinations struct {
	// cidrs are the IP ranges the name servers' addresses must resolve into, e.g. 10.20.0.0/16.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="spec.allowedDestinations.cidrs: each item must be a CIDR such as 10.0.0.0/8"
	CIDRs []string `json:"cidrs"`

	// ports are the ports that may be dialled; empty allows any port.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	Ports []int32 `json:"ports,omitempty"`
}

// NameServerTLS is how the operator speaks TLS to name servers.
type NameServerTLS struct {
	// serverName is the name the name servers' certificates must carry; the dialled host by default.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServerName string `json:"serverName,omitempty"`

	// caSecret names a Secret in the operator's credentials namespace whose ca.crt holds the PEM
	// certificates that sign the name servers'; the system's roots when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CASecret string `json:"caSecret,omitempty"`
}

// ClusterNameServerStatus is what the operator last found of the name servers.
type ClusterNameServerStatus struct {
	// conditions: Ready (the last read of the routes reached a name server), with the reason of the last
	// failure when it did not.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClusterNameServer is a set of RocketMQ name servers that an administrator lets the ConsumerGroups of
// chosen namespaces read their routes from.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=cns
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterNameServer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ClusterNameServerSpec `json:"spec"`
	// +optional
	Status ClusterNameServerStatus `json:"status,omitempty"`
}

// ClusterNameServerList is a list of ClusterNameServers.
// +kubebuilder:object:root=true
type ClusterNameServerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterNameServer `json:"items"`
}
