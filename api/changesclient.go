package api

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Changes asks the daemon's feed (GET /v1/changes). ErrResync when the
// changes after q.Since are no longer kept.
func (c *Client) Changes(ctx context.Context, q ChangesQuery) (ChangesPage, error) {
	v := url.Values{}
	if q.Since.Set {
		v.Set("since", q.Since.String())
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Wait > 0 {
		v.Set("wait", q.Wait.String())
	}
	var p ChangesPage
	err := c.getJSON(ctx, "/v1/changes", v, &p)
	var se *StatusError
	if errors.As(err, &se) && se.Code == CodeResync {
		return p, &resyncError{why: strings.TrimPrefix(se.Message, ErrResync.Error()+": "), se: se}
	}
	return p, err
}

// resyncError is a 410 answer: ErrResync, and the *StatusError.
type resyncError struct {
	why string
	se  *StatusError
}

func (e *resyncError) Error() string        { return fmt.Sprintf("%v: %s", ErrResync, e.why) }
func (e *resyncError) Is(target error) bool { return target == ErrResync }
func (e *resyncError) Unwrap() error        { return e.se }
