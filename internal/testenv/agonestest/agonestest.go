// Package agonestest is a cluster's Agones allocator for tests: Agones'
// allocation API over mutual TLS, allocating as agones-allocator does
// from the GameServers of a test control plane (internal/testenv/
// controlplane's GameServer CRD). A request's selectors are tried in
// order; a Ready game server of the request's namespace carrying the
// selector's labels becomes Allocated, by an update conditional on its
// resourceVersion, as Agones' allocator writes it; and its fleet's status
// counts it, as Agones' fleet controller would, so that the cluster's
// publisher sees the fleet's capacity fall.
package agonestest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
	"github.com/fleetcast/fleetcast/publisher"
)

// GameServerGVR is Agones' GameServer resource.
var GameServerGVR = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "gameservers"}

// Allocator allocates from the GameServers dyn reaches.
type Allocator struct {
	pb.UnimplementedAllocationServiceServer
	dyn dynamic.Interface
	// mu makes allocations one at a time: the fleet's status is read and
	// written back.
	mu sync.Mutex
	// requests are the requests received, in order.
	requests []*pb.AllocationRequest
}

// New returns an Allocator over dyn.
func New(dyn dynamic.Interface) *Allocator { return &Allocator{dyn: dyn} }

// Requests returns the requests received so far.
func (a *Allocator) Requests() []*pb.AllocationRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.requests)
}

// Allocate allocates a game server as agones-allocator does, or answers
// RESOURCE_EXHAUSTED as it does when none is Ready.
func (a *Allocator) Allocate(ctx context.Context, req *pb.AllocationRequest) (*pb.AllocationResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests = append(a.requests, proto.CloneOf(req))
	ns := req.GetNamespace()
	if ns == "" {
		ns = "default"
	}
	selectors := req.GetGameServerSelectors()
	if len(selectors) == 0 {
		selectors = []*pb.GameServerSelector{{}}
	}
	for _, s := range selectors {
		sel, err := labels.ValidatedSelectorFromSet(s.GetMatchLabels())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "matchLabels: %v", err)
		}
		list, err := a.dyn.Resource(GameServerGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return nil, status.Errorf(codes.Internal, "list game servers: %v", err)
		}
		slices.SortFunc(list.Items, func(x, y unstructured.Unstructured) int { return strings.Compare(x.GetName(), y.GetName()) })
		want := "Ready"
		if s.GetGameServerState() == pb.GameServerSelector_ALLOCATED {
			want = "Allocated"
		}
		for i := range list.Items {
			gs := &list.Items[i]
			if state, _, _ := unstructured.NestedString(gs.Object, "status", "state"); state != want {
				continue
			}
			if want == "Ready" {
				if err := unstructured.SetNestedField(gs.Object, "Allocated", "status", "state"); err != nil {
					return nil, status.Errorf(codes.Internal, "game server %s: %v", gs.GetName(), err)
				}
				if _, err := a.dyn.Resource(GameServerGVR).Namespace(ns).Update(ctx, gs, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
					continue // allocated meanwhile
				} else if err != nil {
					return nil, status.Errorf(codes.Internal, "allocate game server %s: %v", gs.GetName(), err)
				}
				if err := a.countAllocated(ctx, ns, gs.GetLabels()["agones.dev/fleet"]); err != nil {
					return nil, status.Errorf(codes.Internal, "fleet of %s: %v", gs.GetName(), err)
				}
			}
			return response(gs), nil
		}
	}
	return nil, status.Error(codes.ResourceExhausted, "there is no available GameServer to allocate")
}

// countAllocated moves one game server of the fleet from Ready to
// Allocated in its status, as Agones' fleet controller aggregates them.
func (a *Allocator) countAllocated(ctx context.Context, ns, fleet string) error {
	if fleet == "" {
		return nil
	}
	fleets := a.dyn.Resource(publisher.FleetGVR).Namespace(ns)
	f, err := fleets.Get(ctx, fleet, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ready, _, _ := unstructured.NestedInt64(f.Object, "status", "readyReplicas")
	allocated, _, _ := unstructured.NestedInt64(f.Object, "status", "allocatedReplicas")
	if err := unstructured.SetNestedField(f.Object, max(0, ready-1), "status", "readyReplicas"); err != nil {
		return err
	}
	if err := unstructured.SetNestedField(f.Object, allocated+1, "status", "allocatedReplicas"); err != nil {
		return err
	}
	_, err = fleets.UpdateStatus(ctx, f, metav1.UpdateOptions{})
	return err
}

// response is what agones-allocator answers for an allocated game server.
func response(gs *unstructured.Unstructured) *pb.AllocationResponse {
	out := &pb.AllocationResponse{GameServerName: gs.GetName(), Source: "local"}
	out.Address, _, _ = unstructured.NestedString(gs.Object, "status", "address")
	out.NodeName, _, _ = unstructured.NestedString(gs.Object, "status", "nodeName")
	ports, _, _ := unstructured.NestedSlice(gs.Object, "status", "ports")
	for _, p := range ports {
		m, _ := p.(map[string]any)
		name, _ := m["name"].(string)
		port, _ := m["port"].(int64)
		out.Ports = append(out.Ports, &pb.AllocationResponse_GameServerStatusPort{Name: name, Port: int32(port)})
	}
	return out
}

// Serve serves a on the loopback over mutual TLS (Serve).
func (a *Allocator) Serve(tb testing.TB, cert tls.Certificate, clientCAs *x509.CertPool) string {
	tb.Helper()
	return Serve(tb, a, cert, clientCAs)
}

// Serve serves an allocation service on the loopback over mutual TLS, as
// agones-allocator does, with the server certificate cert, to clients
// whose certificates clientCAs signed, until the test ends; it returns
// the address.
func Serve(tb testing.TB, a pb.AllocationServiceServer, cert tls.Certificate, clientCAs *x509.CertPool) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert},
		ClientCAs: clientCAs, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})))
	pb.RegisterAllocationServiceServer(srv, a)
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// GameServer is a Ready game server of a fleet, as Agones' GameServerSet
// controller creates it: its template's labels and agones.dev/fleet.
func GameServer(ns, fleet, name string, labels map[string]string, port int64) *unstructured.Unstructured {
	l := map[string]any{"agones.dev/fleet": fleet}
	for k, v := range labels {
		l[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agones.dev/v1",
		"kind":       "GameServer",
		"metadata":   map[string]any{"name": name, "namespace": ns, "labels": l},
		"spec":       map[string]any{"ports": []any{map[string]any{"name": "default", "containerPort": int64(7654)}}},
		"status": map[string]any{"state": "Ready", "address": "10.0.0.1", "nodeName": "node-1",
			"ports": []any{map[string]any{"name": "default", "port": port}}},
	}}
}

// CreateGameServers creates n Ready game servers of a fleet in ns, named
// FLEET-0 to FLEET-(n-1), with the template's labels.
func CreateGameServers(ctx context.Context, dyn dynamic.Interface, ns, fleet string, labels map[string]string, n int) error {
	for i := range n {
		gs := GameServer(ns, fleet, fmt.Sprintf("%s-%d", fleet, i), labels, int64(7000+i))
		if _, err := dyn.Resource(GameServerGVR).Namespace(ns).Create(ctx, gs, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create game server %s: %w", gs.GetName(), err)
		}
	}
	return nil
}
