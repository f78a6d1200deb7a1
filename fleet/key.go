package fleet

import (
	"fmt"
	"strings"
)

// Key identifies one Fleet: the cluster it runs in and its Kubernetes
// namespace and name.
type Key struct {
	Cluster   string
	Namespace string
	Name      string
}

// idSeparator joins the parts of a document ID. It cannot occur in any part
// (DNS-1123 labels and subdomains use only [a-z0-9.-]) and it sorts below
// every character that can, so the byte order of document IDs is the
// (cluster, namespace, name) tuple order. Snapshot ranges rely on that.
const idSeparator = ","

// Limits from Kubernetes' validation of names.
const (
	maxLabelLen     = 63  // DNS-1123 label
	maxSubdomainLen = 253 // DNS-1123 subdomain
)

// Validate reports whether k names a fleet fleetcast can store: the cluster
// and namespace are DNS-1123 labels, the name a DNS-1123 subdomain, as
// Kubernetes requires for namespaces and Fleet names.
func (k Key) Validate() error {
	if err := ValidateClusterName(k.Cluster); err != nil {
		return err
	}
	return k.Ref().Validate()
}

// ValidateClusterName reports whether name is a valid cluster name: a
// DNS-1123 label, so that it is also a valid Firestore document ID and a
// valid Kubernetes label value.
func ValidateClusterName(name string) error {
	if err := validateDNSLabel(name); err != nil {
		return fmt.Errorf("%w: cluster %q: %v", ErrInvalid, name, err)
	}
	return nil
}

// ValidateNamespace reports whether name is a valid Kubernetes namespace:
// a DNS-1123 label.
func ValidateNamespace(name string) error {
	if err := validateDNSLabel(name); err != nil {
		return fmt.Errorf("%w: namespace %q: %v", ErrInvalid, name, err)
	}
	return nil
}

// Ref returns the key's namespace and name.
func (k Key) Ref() FleetRef { return FleetRef{Namespace: k.Namespace, Name: k.Name} }

// String returns "cluster/namespace/name", for logs and messages.
func (k Key) String() string {
	return k.Cluster + "/" + k.Namespace + "/" + k.Name
}

// DocID returns the Firestore document ID of k in the fleets collection,
// "cluster,namespace,name". It is reversible with ParseDocID, never contains
// "/", never is "." or "..", never matches __.*__ (it starts with a letter or
// digit) and is at most 63+1+63+1+253 = 381 bytes. k must be valid.
func (k Key) DocID() string {
	return k.Cluster + idSeparator + k.Namespace + idSeparator + k.Name
}

// ParseDocID is the inverse of Key.DocID. It rejects any ID that DocID
// could not have produced.
func ParseDocID(id string) (Key, error) {
	parts := strings.Split(id, idSeparator)
	if len(parts) != 3 {
		return Key{}, fmt.Errorf("%w: document id %q: want cluster,namespace,name", ErrInvalid, id)
	}
	k := Key{Cluster: parts[0], Namespace: parts[1], Name: parts[2]}
	if err := k.Validate(); err != nil {
		return Key{}, fmt.Errorf("document id %q: %w", id, err)
	}
	return k, nil
}

// ClusterPrefix returns the prefix every fleet document ID of cluster
// starts with, and the smallest string above all such IDs: the half-open
// range [lo, hi) selects exactly that cluster's fleets.
func ClusterPrefix(cluster string) (lo, hi string) {
	// The separator is followed by '-' (0x2C+1) in byte order, and no ID of
	// this cluster can reach it; IDs of a cluster named cluster+"-x" start
	// with cluster+"-", at or above hi.
	return cluster + idSeparator, cluster + string(rune(idSeparator[0]+1))
}

func validateDNSLabel(s string) error {
	if s == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(s) > maxLabelLen {
		return fmt.Errorf("must be at most %d characters", maxLabelLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isLowerAlnum(c):
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return fmt.Errorf("must consist of lower case alphanumeric characters or '-', and start and end with an alphanumeric character")
		}
	}
	return nil
}

func validateDNSSubdomain(s string) error {
	if s == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(s) > maxSubdomainLen {
		return fmt.Errorf("must be at most %d characters", maxSubdomainLen)
	}
	for _, part := range strings.Split(s, ".") {
		if part == "" {
			return fmt.Errorf("must not have empty dot-separated parts")
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			if !isLowerAlnum(c) && !(c == '-' && i > 0 && i < len(part)-1) {
				return fmt.Errorf("must consist of lower case alphanumeric characters, '-' or '.', and start and end with an alphanumeric character")
			}
		}
	}
	return nil
}

func isLowerAlnum(c byte) bool { return ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') }
