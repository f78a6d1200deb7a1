package fleet

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// MaxEndpointBytes bounds an advertised endpoint: a DNS name's 253 bytes,
// a colon and a port.
const MaxEndpointBytes = 253 + 1 + 5

// ValidateEndpoint reports whether s is empty or HOST:PORT, HOST a DNS
// name or an IP address (IPv6 in brackets) and PORT 1 to 65535: where a
// cluster's Agones allocator service is reached.
func ValidateEndpoint(field, s string) error {
	if s == "" {
		return nil
	}
	if len(s) > MaxEndpointBytes {
		return fmt.Errorf("%w: %s: %d bytes, at most %d", ErrInvalid, field, len(s), MaxEndpointBytes)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%w: %s %q: want HOST:PORT: %v", ErrInvalid, field, s, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%w: %s %q: port %q is not 1 to 65535", ErrInvalid, field, s, port)
	}
	if net.ParseIP(host) == nil && !isDNSName(host) {
		return fmt.Errorf("%w: %s %q: host %q is neither a DNS name nor an IP address", ErrInvalid, field, s, host)
	}
	return nil
}

// isDNSName: dot-separated labels of letters, digits and inner hyphens,
// each at most 63 bytes, at most 253 in all; a trailing dot allowed.
func isDNSName(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
