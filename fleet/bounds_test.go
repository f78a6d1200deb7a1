package fleet

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestCheckTimes(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ms := now.UnixMilli()
	ev := func(term int64, observed time.Time) Event {
		return Event{Version: Version{Term: term, Seq: 1}, ObservedAt: MicrosOf(observed)}
	}
	tests := []struct {
		name    string
		ev      Event
		wantErr string
	}{
		{"now", ev(ms, now), ""},
		{"a clock 9 minutes fast", ev(ms+9*60_000, now.Add(9*time.Minute)), ""},
		{"an old term, a recent observation", ev(1, now.Add(-time.Hour)), ""},
		{"term from the far future", ev(math.MaxInt64, now), "version.term"},
		{"term 11 minutes ahead", ev(ms+11*60_000, now), "version.term"},
		{"observed in year 9000", ev(ms, time.Date(9000, 1, 1, 0, 0, 0, 0, time.UTC)), "observedAt"},
		{"observed 11 minutes ahead", ev(ms, now.Add(11*time.Minute)), "ahead"},
		{"observed before the tombstones", ev(ms, now.Add(-25*time.Hour)), "older than the tombstone retention"},
		{"observed just within the tombstones", ev(ms, now.Add(-23*time.Hour)), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckTimes(tt.ev, now, 24*time.Hour, DefaultMaxClockSkew)
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tt.wantErr)
			assert.True(t, errors.Is(err, ErrInvalid))
		})
	}
}
