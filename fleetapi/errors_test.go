package fleetapi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCodeOfClassifiesEveryFailure(t *testing.T) {
	for err, want := range map[error]Code{
		paramErr("selector", "bad"):                                    InvalidArgument,
		fmt.Errorf("wrapped: %w", notFound("no fleet")):                NotFound,
		context.DeadlineExceeded:                                       Unavailable,
		fmt.Errorf("get: %w", status.Error(codes.Unavailable, "down")): Unavailable,
		status.Error(codes.ResourceExhausted, "quota"):                 Unavailable,
		status.Error(codes.PermissionDenied, "no"):                     PermissionDenied,
		status.Error(codes.Unauthenticated, "who"):                     PermissionDenied,
		status.Error(codes.InvalidArgument, "bad"):                     InvalidArgument,
		status.Error(codes.NotFound, "no database"):                    NotFound,
		status.Error(codes.FailedPrecondition, "index"):                Internal,
		errors.New("anything else"):                                    Internal,
		&Error{Code: ResourceExhausted, Message: "the most streams"}:   ResourceExhausted,
		storeErr(status.Error(codes.Aborted, "contention")):            Unavailable,
		storeErr(status.Error(codes.PermissionDenied, "rules")):        Internal, // the function's own store: a fault
	} {
		assert.Equal(t, want, CodeOf(err), "%v", err)
	}
}
