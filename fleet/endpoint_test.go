package fleet

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestValidateEndpoint(t *testing.T) {
	for _, ok := range []string{"", "34.1.2.3:443", "allocator.pc-eu.example.com:443", "[2001:db8::1]:8443", "agones-allocator.agones-system.svc.cluster.local.:443"} {
		assert.NoError(t, ValidateEndpoint("e", ok), ok)
	}
	for s, want := range map[string]string{
		"34.1.2.3":                  "want HOST:PORT",
		"34.1.2.3:0":                "not 1 to 65535",
		"34.1.2.3:https":            "not 1 to 65535",
		"bad_host:443":              "neither a DNS name",
		"-x.example.com:443":        "neither a DNS name",
		"https://x.example.com:443": "want HOST:PORT",
		strings.Repeat("a", 300):    "at most 259",
	} {
		err := ValidateEndpoint("snapshot.allocatorEndpoint", s)
		assert.ErrorIs(t, err, ErrInvalid, s)
		assert.ErrorContains(t, err, want, s)
	}
}
