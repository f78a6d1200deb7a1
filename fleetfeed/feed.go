// Package fleetfeed is the change feed: the fleet documents the ingest
// function writes, announced on one Pub/Sub topic, which each query
// instance follows through a subscription of its own instead of a
// Firestore realtime listener.
//
// A listener is billed one read for every document written, per
// instance (Firestore's rule); a message costs its bytes, at least 1 000,
// per subscription: an order of magnitude less at fleetcast's document
// sizes (BENCHMARKS.md §7). Firestore stays the truth: an instance loads
// from it, catches up from it what was written before its subscription
// existed, and reads it again at every resync.
//
// The ingest function announces (Announcer) before it acknowledges the
// push, so that an announcement is never lost to a crash: a failed one
// has the event delivered again, and the store answers the redelivery,
// a duplicate, with the same state to announce once more
// (fleet.Applied.Announce). The versions order what a follower applies,
// as they order what the store writes: duplicates and reordering change
// nothing.
package fleetfeed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetview"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/pubsubtopic"
)

// DefaultTopic is the change feed's topic where nothing names another
// (Terraform names it <name_prefix>-fleet-changes).
const DefaultTopic = "fleet-changes"

// Attributes of a change message, so that a subscription can filter by
// cluster without decoding the payload.
const (
	AttrCluster = "cluster"
	AttrFleet   = "fleet" // its document ID (fleet.Key.DocID)
)

// topicID is Pub/Sub's rule for a topic's ID.
var topicID = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$`)

// ValidateTopicID checks a change feed topic's ID by Pub/Sub's rule: 3 to
// 255 letters, digits and -_.~+%, starting with a letter, not with goog.
func ValidateTopicID(id string) error {
	if !topicID.MatchString(id) || strings.HasPrefix(strings.ToLower(id), "goog") {
		return fmt.Errorf("%q is no Pub/Sub topic ID (3 to 255 letters, digits and -_.~+%%, starting with a letter, not with goog)", id)
	}
	return nil
}

// MaxMessageBytes bounds a change message a follower decodes: a fleet
// document Firestore holds is at most 1 MiB.
const MaxMessageBytes = 1 << 20

// Message returns the change message of d: its JSON, and its cluster and
// fleet as attributes.
func Message(d *fleet.Document) (*pubsub.Message, error) {
	data, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode the change of %s: %w", d.Key().DocID(), err)
	}
	return &pubsub.Message{Data: data, Attributes: map[string]string{AttrCluster: d.Cluster, AttrFleet: d.Key().DocID()}}, nil
}

// Decode returns the fleet document of a change message's data. A message
// over MaxMessageBytes, or one that names no valid fleet, is an error.
func Decode(data []byte) (*fleet.Document, error) {
	if len(data) > MaxMessageBytes {
		return nil, fmt.Errorf("change message of %d bytes, over %d", len(data), MaxMessageBytes)
	}
	d := new(fleet.Document)
	if err := json.Unmarshal(data, d); err != nil {
		return nil, fmt.Errorf("decode change message: %w", err)
	}
	if err := fleet.ValidateClusterName(d.Cluster); err != nil {
		return nil, fmt.Errorf("change message: %w", err)
	}
	if d.Namespace == "" || d.Name == "" {
		return nil, errors.New("change message: no fleet namespace or name")
	}
	return d, nil
}

// EnsureTopic creates the change feed's topic in client's project unless
// it exists, where Terraform does not (the emulators, `make demo`).
func EnsureTopic(ctx context.Context, client *pubsub.Client, topicID string) error {
	_, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: pubsubtopic.TopicName(client.Project(), topicID)})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("create the change feed's topic %s: %w", topicID, err)
	}
	return nil
}

// Announcer publishes what the store wrote to the change feed's topic.
type Announcer struct {
	pub *pubsub.Publisher
}

// PublishTimeout bounds one announcement, the client's retries included:
// past it the push is answered with an error, and delivered again.
const PublishTimeout = 10 * time.Second

// NewAnnouncer returns an Announcer publishing to topicID. Stop it to
// flush.
func NewAnnouncer(client *pubsub.Client, topicID string) *Announcer {
	pub := client.Publisher(topicID)
	pub.PublishSettings.Timeout = PublishTimeout
	// A push waits for its announcement: bundle what is published within
	// a millisecond, not the default 10.
	pub.PublishSettings.DelayThreshold = time.Millisecond
	return &Announcer{pub: pub}
}

// Announce publishes docs and waits until Pub/Sub holds every one of them.
func (a *Announcer) Announce(ctx context.Context, docs []*fleet.Document) error {
	results := make([]*pubsub.PublishResult, 0, len(docs))
	for _, d := range docs {
		msg, err := Message(d)
		if err != nil {
			return err
		}
		results = append(results, a.pub.Publish(ctx, msg))
	}
	var errs []error
	for i, r := range results {
		if _, err := r.Get(ctx); err != nil {
			errs = append(errs, fmt.Errorf("announce %s: %w", docs[i].Key().DocID(), err))
		}
	}
	return errors.Join(errs...)
}

// Stop publishes what is buffered and releases the publisher.
func (a *Announcer) Stop() { a.pub.Stop() }

// Follower is a fleetview.Follower: its Source, whose fleets it follows
// on the change feed rather than with a Firestore listener.
type Follower struct {
	fleetview.Source
	client *pubsub.Client
	topic  string
	log    *slog.Logger
}

// NewFollower returns a Follower of src that follows the feed on topicID
// in client's project, logging to log; a fleetview.Checker too when src
// is one (firestoredb's are), so that the view checks its clusters.
func NewFollower(src fleetview.Source, client *pubsub.Client, topicID string, log *slog.Logger) fleetview.Follower {
	f := &Follower{Source: src, client: client, topic: topicID, log: log}
	if c, ok := src.(fleetview.Checker); ok {
		return &checkedFollower{Follower: f, checker: c}
	}
	return f
}

// checkedFollower is a Follower of a Checker, and a Checker.
type checkedFollower struct {
	*Follower
	checker fleetview.Checker
}

func (f *checkedFollower) ClusterDigest(ctx context.Context, cluster string) (count, sum int64, err error) {
	return f.checker.ClusterDigest(ctx, cluster)
}

func (f *checkedFollower) ClusterFleets(ctx context.Context, cluster string, each func(*fleet.Document)) ([]string, error) {
	return f.checker.ClusterFleets(ctx, cluster, each)
}

// Subscription settings of a follower's own subscription.
const (
	// SubscriptionTTL: a subscription its instance did not delete (the
	// instance was killed) is deleted by Pub/Sub after a day without a
	// reader, the shortest expiration Pub/Sub allows.
	SubscriptionTTL = 24 * time.Hour
	// SubscriptionRetention: what a follower has not acknowledged within
	// this is dropped; a view that far behind loads again anyway
	// (Options.Resync).
	SubscriptionRetention = 10 * time.Minute
	// MaxBatch bounds the changes applied as one snapshot.
	MaxBatch = 512
)

// SubscriptionPrefix is what the subscriptions of the followers of topic
// are named before a random suffix: Terraform grants the query identity
// the right to create and delete those alone.
func SubscriptionPrefix(topicID string) string { return topicID + "-view-" }

// FollowFleets follows the feed until ctx ends: it creates a
// subscription of its own, applies what was written at or after since
// (read from the Source: the subscription holds only what is published
// after it exists), then each change the feed delivers, in batches of
// what arrived together. The time it passes apply is when it took the
// batch: the feed has delivered what was written before then, as far as
// Pub/Sub's delivery latency goes, and delivers anything later still.
// It deletes the subscription when it ends.
func (f *Follower) FollowFleets(ctx context.Context, since time.Time, apply func(fleet.Page[fleet.Document], time.Time)) error {
	project := f.client.Project()
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	name := fmt.Sprintf("projects/%s/subscriptions/%s%s", project, SubscriptionPrefix(f.topic), hex.EncodeToString(suffix))
	_, err := f.client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name:                     name,
		Topic:                    pubsubtopic.TopicName(project, f.topic),
		AckDeadlineSeconds:       10,
		MessageRetentionDuration: durationpb.New(SubscriptionRetention),
		ExpirationPolicy:         &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(SubscriptionTTL)},
		Labels:                   map[string]string{"fleetcast": "view"},
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("subscribe to the change feed %s: %w", f.topic, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := f.client.SubscriptionAdminClient.DeleteSubscription(dctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: name}); err != nil {
			f.log.Warn("query view: could not delete its change feed subscription; Pub/Sub deletes it after a day unused",
				"subscription", name, logging.KeyError, err.Error())
		}
	}()
	started := time.Now()
	page, err := f.FleetsWrittenSince(ctx, since)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("catch up with the fleets written since %s: %w", since.Format(time.RFC3339Nano), err)
	}
	apply(page, started)

	msgs := make(chan *pubsub.Message, MaxBatch)
	sub := f.client.Subscriber(name)
	sub.ReceiveSettings.MaxOutstandingMessages = MaxBatch
	sub.ReceiveSettings.MaxOutstandingBytes = 64 << 20
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	received := make(chan error, 1)
	go func() {
		received <- sub.Receive(rctx, func(_ context.Context, m *pubsub.Message) {
			select {
			case msgs <- m:
			case <-rctx.Done():
				m.Nack()
			}
		})
	}()
	for {
		var batch []*pubsub.Message
		select {
		case err := <-received:
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				err = errors.New("the subscription's stream ended")
			}
			return fmt.Errorf("follow the change feed %s: %w", f.topic, err)
		case m := <-msgs:
			batch = append(batch, m)
		}
	drain:
		for len(batch) < MaxBatch {
			select {
			case m := <-msgs:
				batch = append(batch, m)
			default:
				break drain
			}
		}
		took := time.Now()
		var p fleet.Page[fleet.Document]
		for _, m := range batch {
			d, err := Decode(m.Data)
			if err != nil {
				f.log.Error("query view: a change message it cannot read is skipped", logging.KeyMessageID, m.ID, logging.KeyError, err.Error())
				continue
			}
			p.Docs = append(p.Docs, d)
		}
		apply(p, took)
		for _, m := range batch {
			m.Ack()
		}
	}
}
