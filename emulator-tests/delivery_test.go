package emulatortests

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/functions/ingest"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// TestDeliveryFormats posts one event in each format the function accepts:
// a raw Pub/Sub push body, and Eventarc's binary and structured CloudEvents.
func TestDeliveryFormats(t *testing.T) {
	p := newPipeline(t)
	const ceType = "google.cloud.pubsub.topic.v1.messagePublished"
	source := topicSource(p.cluster)
	messageData := func(name, id string) ingest.MessagePublishedData {
		data, err := fleet.EncodeEvent(p.upsert(name, 1, 2))
		require.NoError(t, err)
		return ingest.MessagePublishedData{
			Message:      ingest.PubsubMessage{Data: data, MessageID: id, PublishTime: time.Now().UTC()},
			Subscription: "projects/" + project + "/subscriptions/eventarc",
		}
	}
	tests := []struct {
		name    string
		request func(id string) *http.Request
	}{
		{"raw push body", func(id string) *http.Request {
			body := mustJSON(t, messageData("raw", id))
			r, _ := http.NewRequest(http.MethodPost, pushURL(p.fn, p.cluster), bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			return r
		}},
		{"binary CloudEvent", func(id string) *http.Request {
			body := mustJSON(t, messageData("binary", id))
			r, _ := http.NewRequest(http.MethodPost, pushURL(p.fn, p.cluster), bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("ce-specversion", "1.0")
			r.Header.Set("ce-id", id)
			r.Header.Set("ce-type", ceType)
			r.Header.Set("ce-source", source)
			return r
		}},
		{"structured CloudEvent", func(id string) *http.Request {
			body := mustJSON(t, map[string]any{
				"specversion": "1.0", "id": id, "type": ceType, "source": source,
				"datacontenttype": "application/json", "data": messageData("structured", id),
			})
			r, _ := http.NewRequest(http.MethodPost, pushURL(p.fn, p.cluster), bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/cloudevents+json")
			return r
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "direct-" + randomHex(t, 6)
			resp, err := testhttp.Client.Do(tt.request(id).WithContext(t.Context()))
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			lines := p.fn.logs.waitMessage(t, id, ingested)
			assert.Equal(t, "created", outcomeOf(lines))
		})
	}
	for _, name := range []string{"raw", "binary", "structured"} {
		d, _ := p.doc(name)
		require.NotNil(t, d, name)
		assert.Equal(t, int64(2), d.Status.ReadyReplicas, name)
	}
}

// TestNotJSONIsAckedAndLogged bypasses the topic's schema, as a push from a
// misconfigured subscription would.
func TestNotJSONIsAckedAndLogged(t *testing.T) {
	p := newPipeline(t)
	id := "garbage-" + randomHex(t, 6)
	body := mustJSON(t, map[string]any{
		"message":      map[string]any{"data": base64.StdEncoding.EncodeToString([]byte("not json at all")), "messageId": id},
		"subscription": "projects/" + project + "/subscriptions/misconfigured",
	})
	resp, err := testhttp.Client.Post(pushURL(p.fn, p.cluster), "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "acknowledged: retrying cannot fix it")
	lines := p.fn.logs.waitMessage(t, id, dropped)
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0]["reason"], "decode event")
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	require.NoError(tb, err)
	return b
}

// TestAPushWhoseClientGaveUpHoldsUpNoOther: rounds of pushes whose client
// gives up mid-flight (a push deadline passing, a dropped connection)
// leave the function answering every later push within its deadline.
// (Served as a CloudEvent function, the Functions Framework's receiver
// pairs each request with whichever message is queued; a request given up
// before its pairing leaves a message no one answers, and in chaos runs an
// instance stopped answering after 10 to 19 seeds of flood. This test did
// not reproduce that on its own; it holds the HTTP function to the rule.)
func TestAPushWhoseClientGaveUpHoldsUpNoOther(t *testing.T) {
	p := newPipeline(t)
	body := func(seq int64) []byte {
		data, err := fleet.EncodeEvent(p.upsert("patient", seq, 1))
		require.NoError(t, err)
		return mustJSON(t, ingest.MessagePublishedData{Message: ingest.PubsubMessage{Data: data, MessageID: fmt.Sprintf("gave-up-%s-%d", p.cluster, seq)}})
	}
	push := func(ctx context.Context, seq int64) (*http.Response, error) {
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, pushURL(p.fn, p.cluster), bytes.NewReader(body(seq)))
		require.NoError(t, err)
		r.Header.Set("Content-Type", "application/json")
		return testhttp.Client.Do(r)
	}
	// Rounds of pushes given up mid-flight, as a subscription's are when
	// their deadline passes: each sent whole or in part, its connection
	// closed before the answer.
	u, err := url.Parse(pushURL(p.fn, p.cluster))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for round := range 10 {
		for i := range 32 {
			seq := int64(round*32 + i + 1)
			wg.Go(func() {
				c, err := net.Dial("tcp", u.Host)
				if err != nil {
					return
				}
				defer c.Close()
				b := body(seq)
				head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", u.Path, u.Host, len(b))
				_, _ = c.Write(append([]byte(head), b[:len(b)*(i%3)/2]...))
				<-time.After(time.Duration(i%7) * time.Millisecond)
			})
		}
		wg.Wait()
	}
	for seq := int64(1000); seq < 1010; seq++ {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // the function's deadline is 3 s
		resp, err := push(ctx, seq)
		cancel()
		require.NoError(t, err, "push %d answered within its deadline", seq)
		why, _ := io.ReadAll(resp.Body) // the function's reason for a 500
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "push %d: %s", seq, why)
	}
}
