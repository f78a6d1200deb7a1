package publisher

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
)

// TermAnnotation on the publisher's Lease holds the last term taken.
const TermAnnotation = "fleetcast.dev/term"

// ErrNotHolder is returned by TermStore.Next when the Lease is no longer
// held by the caller: it must not publish.
var ErrNotHolder = errors.New("the lease is held by another instance")

// TermStore hands out terms: each larger than every term before it for the
// cluster, whichever instance took it, whatever its clock says, with or
// without leader election. The last term is kept on the Lease; the next is
// max(last + 1, now in milliseconds), written with optimistic concurrency,
// so two instances can never take the same term.
type TermStore struct {
	leases    coordinationclient.LeaseInterface
	name      string
	clock     clock.PassiveClock
	namespace string
}

// NewTermStore returns a TermStore on the Lease name in namespace.
func NewTermStore(client coordinationclient.CoordinationV1Interface, namespace, name string, clk clock.PassiveClock) *TermStore {
	return &TermStore{leases: client.Leases(namespace), name: name, clock: clk, namespace: namespace}
}

// Next takes the next term. With holder set (leader election), it first
// checks that holder still holds the Lease; without, it creates the Lease
// when missing.
func (s *TermStore) Next(ctx context.Context, holder string) (int64, error) {
	for {
		lease, err := s.leases.Get(ctx, s.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && holder == "" {
			lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.namespace}}
			lease, err = s.leases.Create(ctx, lease, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
		}
		if err != nil {
			return 0, fmt.Errorf("read lease %s/%s: %w", s.namespace, s.name, err)
		}
		if holder != "" && (lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != holder) {
			return 0, fmt.Errorf("take a term as %s: %w", holder, ErrNotHolder)
		}
		var last int64
		if v, ok := lease.Annotations[TermAnnotation]; ok {
			if last, err = strconv.ParseInt(v, 10, 64); err != nil {
				return 0, fmt.Errorf("lease %s/%s: annotation %s=%q is not a number", s.namespace, s.name, TermAnnotation, v)
			}
		}
		term := max(last+1, s.clock.Now().UnixMilli())
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		lease.Annotations[TermAnnotation] = strconv.FormatInt(term, 10)
		_, err = s.leases.Update(ctx, lease, metav1.UpdateOptions{})
		switch {
		case err == nil:
			return term, nil
		case apierrors.IsConflict(err):
			// The elector renewed the Lease meanwhile, or another instance
			// took a term: read it again.
			continue
		default:
			return 0, fmt.Errorf("store term on lease %s/%s: %w", s.namespace, s.name, err)
		}
	}
}
