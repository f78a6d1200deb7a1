package allocator

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/fleetcast/fleetcast/fleet"
)

// Policy is one of Agones' GameServerAllocationPolicies (group
// multicluster.agones.dev, version v1), read as a studio keeps them: a
// cluster its allocations may go to, its priority and weight among the
// others, and how to reach its allocator.
type Policy struct {
	// Name and Labels are the policy's metadata: a request's
	// multiClusterSetting.policySelector chooses policies by their labels.
	Name   string
	Labels map[string]string
	// Priority: lower first. Weight shares the requests among the
	// clusters of one priority; 0 sends none there.
	Priority int32
	Weight   int32
	// Cluster is connectionInfo.clusterName: the cluster's name in
	// fleetcast (its publisher's --cluster).
	Cluster string
	// Endpoints are connectionInfo.allocationEndpoints, HOST or HOST:PORT
	// (port 443 when left out), tried in order; none: the endpoint the
	// cluster advertises (its publisher's --allocator-endpoint).
	Endpoints []string
	// SecretName is connectionInfo.secretName: the Secret holding the
	// client certificate the cluster's allocator trusts (tls.crt, tls.key)
	// and, unless ServerCA is given, the CA of its server certificate
	// (ca.crt).
	SecretName string
	// Namespace is connectionInfo.namespace: the namespace of the game
	// servers in that cluster, which the request is forwarded with; empty:
	// the request's.
	Namespace string
	// ServerCA is connectionInfo.serverCa: the CA of the allocator's
	// server certificate, PEM.
	ServerCA []byte
}

// MaxPolicies bounds the policies one service reads.
const MaxPolicies = 1000

// gameServerAllocationPolicy is the resource as Kubernetes serves it.
type gameServerAllocationPolicy struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Priority       *int32 `json:"priority"`
		Weight         *int32 `json:"weight"`
		ConnectionInfo struct {
			AllocationEndpoints []string `json:"allocationEndpoints"`
			ClusterName         string   `json:"clusterName"`
			Namespace           string   `json:"namespace"`
			SecretName          string   `json:"secretName"`
			ServerCA            string   `json:"serverCa"`
		} `json:"connectionInfo"`
	} `json:"spec"`
	// Items are a List's (kubectl get -o yaml of several).
	Items []gameServerAllocationPolicy `json:"items"`
}

// ParsePolicies reads GameServerAllocationPolicies as YAML or JSON: one
// or more documents, each a policy or a List of them, as `kubectl get
// gameserverallocationpolicies -o yaml` writes them. Every policy must
// name a valid cluster, priority and weight, and at most one policy a
// cluster; an error names the policy and the field.
func ParsePolicies(data []byte) ([]Policy, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []Policy
	seen := map[string]string{}
	for doc := 1; ; doc++ {
		var g gameServerAllocationPolicy
		err := dec.Decode(&g)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		items := []gameServerAllocationPolicy{g}
		if g.Kind == "List" || g.Kind == "GameServerAllocationPolicyList" {
			items = g.Items
		}
		for _, it := range items {
			if it.Kind == "" && it.APIVersion == "" && it.Metadata.Name == "" {
				continue // an empty document
			}
			p, err := it.policy()
			if err != nil {
				return nil, fmt.Errorf("document %d: GameServerAllocationPolicy %q: %w", doc, it.Metadata.Name, err)
			}
			if other, dup := seen[p.Cluster]; dup {
				return nil, fmt.Errorf("document %d: GameServerAllocationPolicy %q: cluster %q already has policy %q: give each cluster one policy", doc, p.Name, p.Cluster, other)
			}
			seen[p.Cluster] = p.Name
			if out = append(out, p); len(out) > MaxPolicies {
				return nil, fmt.Errorf("more than %d policies", MaxPolicies)
			}
		}
	}
	return out, nil
}

func (g gameServerAllocationPolicy) policy() (Policy, error) {
	if g.APIVersion != "multicluster.agones.dev/v1" || g.Kind != "GameServerAllocationPolicy" {
		return Policy{}, fmt.Errorf("apiVersion %q, kind %q: want multicluster.agones.dev/v1 GameServerAllocationPolicy", g.APIVersion, g.Kind)
	}
	ci := g.Spec.ConnectionInfo
	p := Policy{Name: g.Metadata.Name, Labels: g.Metadata.Labels, Cluster: ci.ClusterName,
		Endpoints: ci.AllocationEndpoints, SecretName: ci.SecretName, Namespace: ci.Namespace}
	if err := fleet.ValidateLabels("metadata.labels", p.Labels); err != nil {
		return Policy{}, errors.New(reason(err))
	}
	if g.Spec.Priority == nil || *g.Spec.Priority < 0 {
		return Policy{}, fmt.Errorf("spec.priority: want an integer of 0 (first) or more")
	}
	if g.Spec.Weight == nil || *g.Spec.Weight < 0 {
		return Policy{}, fmt.Errorf("spec.weight: want an integer of 0 (never) or more")
	}
	p.Priority, p.Weight = *g.Spec.Priority, *g.Spec.Weight
	if err := fleet.ValidateClusterName(p.Cluster); err != nil {
		return Policy{}, fmt.Errorf("spec.connectionInfo.clusterName: %s", reason(err))
	}
	for i, e := range p.Endpoints {
		if _, err := EndpointAddress(e); err != nil {
			return Policy{}, fmt.Errorf("spec.connectionInfo.allocationEndpoints[%d]: %w", i, err)
		}
	}
	if p.Namespace != "" {
		if err := fleet.ValidateNamespace(p.Namespace); err != nil {
			return Policy{}, fmt.Errorf("spec.connectionInfo.namespace: %s", reason(err))
		}
	}
	if p.SecretName == "" {
		return Policy{}, fmt.Errorf("spec.connectionInfo.secretName: want the Secret of the client certificate for %s's allocator", p.Cluster)
	}
	if ci.ServerCA != "" {
		ca, err := base64.StdEncoding.DecodeString(ci.ServerCA)
		if err != nil {
			return Policy{}, fmt.Errorf("spec.connectionInfo.serverCa: want base64 of the PEM: %v", err)
		}
		p.ServerCA = ca
	}
	return p, nil
}

// EndpointAddress returns an allocation endpoint as HOST:PORT: HOST alone
// is port 443, where Agones' allocator service listens.
func EndpointAddress(e string) (string, error) {
	host, port, err := net.SplitHostPort(e)
	if err != nil {
		host, port = e, "443"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: want HOST or HOST:PORT", e)
	}
	addr := net.JoinHostPort(host, port)
	if err := fleet.ValidateEndpoint("endpoint", addr); err != nil || host == "" {
		return "", fmt.Errorf("%q: want HOST or HOST:PORT, HOST a DNS name or an IP address", e)
	}
	return addr, nil
}
