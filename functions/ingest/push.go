package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/fleetcast/fleetcast/logging"
)

// MessagePublishedType is the CloudEvent type of a Pub/Sub message.
const MessagePublishedType = "google.cloud.pubsub.topic.v1.messagePublished"

// MaxPushBytes bounds a push request's body: Pub/Sub's 10 MB message,
// base64-encoded in JSON, and its envelope.
const MaxPushBytes = 16 << 20

// ServeHTTP answers one push as the function is deployed (an HTTP
// function the push subscription posts to, the topic in the path): a raw
// Pub/Sub push body, or an Eventarc CloudEvent, binary or structured.
// 200 acknowledges the message; 500 asks for it again (Handle's error).
//
// It replaces the Functions Framework's CloudEvent functions, whose
// receiver pairs each request with another's answer: a request whose
// client gives up (a push timeout) leaves its message unanswered in the
// receiver's queue, every later request waits behind one more such
// message, and an instance stops answering once traffic pauses (measured:
// after about 13 chaos seeds, every push hung until its client's timeout).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "a push is a POST", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxPushBytes))
	if err != nil {
		http.Error(w, fmt.Sprintf("read the push: %v", err), http.StatusBadRequest)
		return
	}
	e, err := pushEvent(r, body)
	if err != nil {
		// Nothing a redelivery could change: acknowledged, as every
		// drop is, after its line.
		h.drop(r.Context(), "dropping a request that is no push", DropNotPubSub, "path", r.URL.Path, "reason", err.Error())
		w.WriteHeader(http.StatusOK)
		return
	}
	if err := h.handleWithin(r.Context(), e); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// answerGrace is how long past EVENT_TIMEOUT an answer waits for Handle
// to return its own error (a store that honours its context does so at
// the deadline) before it answers without it.
const answerGrace = 250 * time.Millisecond

// handleWithin runs Handle and returns its error, or, when Handle has not
// returned by EVENT_TIMEOUT (a store call that ignores its deadline, a
// blocked log), an error that asks for redelivery: the push is answered
// within its deadline whatever the store does. Handle goes on in the
// background, holding its cluster's share of the instance
// (MAX_CLUSTER_IN_FLIGHT) until it returns, so a stuck store costs a
// cluster's share of requests, never the instance's goroutines without
// bound.
func (h *Handler) handleWithin(ctx context.Context, e event.Event) error {
	ctx, cancel := context.WithTimeoutCause(ctx, h.cfg.EventTimeout,
		fmt.Errorf("not applied within EVENT_TIMEOUT (%v)", h.cfg.EventTimeout))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.Handle(ctx, e) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	grace := time.NewTimer(answerGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		return err
	case <-grace.C:
		// Logged aside: the answer waits on nothing the handling might
		// be stuck on, the log's writer included.
		n := h.overdue.Add(1)
		go h.log.ErrorContext(context.WithoutCancel(ctx), "fleet event answered unapplied: its handling outlived EVENT_TIMEOUT; asking for redelivery",
			logging.KeyMessageID, e.ID(), logging.KeyTopic, e.Source(), "overdue", n, logging.KeyError, context.Cause(ctx).Error())
		return fmt.Errorf("message %s: %w", e.ID(), context.Cause(ctx))
	}
}

// pushEvent is the CloudEvent of a push: the request's own, if it is one
// (a ce-id header or a cloudevents content type), or, for a raw Pub/Sub
// push body, the messagePublished event the Functions Framework would make
// of it — its source the topic the request's path names
// (/projects/P/topics/T), its ID the message's.
func pushEvent(r *http.Request, body []byte) (event.Event, error) {
	if r.Header.Get("ce-id") != "" || strings.Contains(r.Header.Get("Content-Type"), "cloudevents") {
		r.Body = io.NopCloser(bytes.NewReader(body))
		e, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			return event.Event{}, fmt.Errorf("not a CloudEvent: %w", err)
		}
		return *e, nil
	}
	var push MessagePublishedData
	if err := json.Unmarshal(body, &push); err != nil {
		return event.Event{}, fmt.Errorf("not a Pub/Sub push body: %w", err)
	}
	if push.Message.MessageID == "" {
		return event.Event{}, errors.New("not a Pub/Sub push body: no message.messageId")
	}
	e := event.New()
	e.SetID(push.Message.MessageID)
	e.SetType(MessagePublishedType)
	e.SetSource("//pubsub.googleapis.com/" + strings.TrimPrefix(r.URL.Path, "/"))
	if !push.Message.PublishTime.IsZero() {
		e.SetTime(push.Message.PublishTime)
	}
	if err := e.SetData(event.ApplicationJSON, json.RawMessage(body)); err != nil {
		return event.Event{}, err
	}
	return e, nil
}

var _ http.Handler = (*Handler)(nil)
