package firestoredb

import (
	"context"
	"errors"
	"fmt"

	"cloud.google.com/go/firestore"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/fleet"
)

// FleetFilter holds the equality filters Firestore applies when listing
// fleets; single-field indexes serve any combination of them.
type FleetFilter struct {
	// Clusters, if any, the fleet must be in (at most 30).
	Clusters  []string
	Namespace string
	// Labels maps label keys to the value they must have.
	Labels map[string]string
}

// ListFleets returns the live fleets matching f. Label keys such as
// app.kubernetes.io/version go through a field path: as a dotted string
// they would name nested fields.
func (s *Store) ListFleets(ctx context.Context, f FleetFilter) ([]*fleet.Document, error) {
	q := s.client.Collection(fleet.FleetsCollection).Where("deleted", "==", false)
	switch len(f.Clusters) {
	case 0:
	case 1:
		q = q.Where("cluster", "==", f.Clusters[0])
	default:
		q = q.Where("cluster", "in", f.Clusters)
	}
	if f.Namespace != "" {
		q = q.Where("namespace", "==", f.Namespace)
	}
	for k, v := range f.Labels {
		q = q.WherePath(firestore.FieldPath{"labels", k}, "==", v)
	}
	return fleets(q.Documents(ctx))
}

// FleetsWithLabel returns the fleets (tombstones included: filter them)
// that carry label key, whatever its value.
func (s *Store) FleetsWithLabel(ctx context.Context, key string) ([]*fleet.Document, error) {
	q := s.client.Collection(fleet.FleetsCollection).WherePath(firestore.FieldPath{"labels", key}, ">=", "")
	return fleets(q.Documents(ctx))
}

// GetFleet returns a fleet's document; nil when there is none.
func (s *Store) GetFleet(ctx context.Context, k fleet.Key) (*fleet.Document, error) {
	snap, err := s.FleetRef(k).Get(ctx)
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get fleet %s: %w", k, err)
	}
	var d fleet.Document
	if err := snap.DataTo(&d); err != nil {
		return nil, fmt.Errorf("decode %s: %w", snap.Ref.Path, err)
	}
	return &d, nil
}

// ListClusters returns every cluster document.
func (s *Store) ListClusters(ctx context.Context) ([]*fleet.ClusterDocument, error) {
	return all[fleet.ClusterDocument](s.client.Collection(fleet.ClustersCollection).Documents(ctx))
}

// GetCluster returns a cluster's document; nil when there is none.
func (s *Store) GetCluster(ctx context.Context, name string) (*fleet.ClusterDocument, error) {
	snap, err := s.ClusterRef(name).Get(ctx)
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get cluster %s: %w", name, err)
	}
	var c fleet.ClusterDocument
	if err := snap.DataTo(&c); err != nil {
		return nil, fmt.Errorf("decode %s: %w", snap.Ref.Path, err)
	}
	return &c, nil
}

func fleets(it *firestore.DocumentIterator) ([]*fleet.Document, error) {
	return all[fleet.Document](it)
}

// all decodes every document of it.
func all[T any](it *firestore.DocumentIterator) ([]*T, error) {
	defer it.Stop()
	var out []*T
	for {
		snap, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list documents: %w", err)
		}
		v := new(T)
		if err := snap.DataTo(v); err != nil {
			return nil, fmt.Errorf("decode %s: %w", snap.Ref.Path, err)
		}
		out = append(out, v)
	}
}
