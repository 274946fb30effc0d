package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// AuditStart asks the daemon to start an audit run now and returns its
// id. A path outside the roots is refused with an error wrapping
// ErrOutsideRoots, one with nothing indexed at or below it with
// ErrNotFound; nothing is started then.
func (c *Client) AuditStart(ctx context.Context, req AuditRequest) (uint64, error) {
	v := url.Values{}
	if req.TimeLimit > 0 {
		v.Set("time_limit", req.TimeLimit.String())
	}
	if req.FullSpeed {
		v.Set("full_speed", "1")
	}
	var out struct {
		ID uint64 `json:"id"`
	}
	err := c.postJSON(ctx, "/v1/audit/run", v, dedupBody(req.Paths), &out)
	return out.ID, err
}

// AuditRun returns run id's summary. With wait > 0 the daemon answers
// when the run has ended or after wait (one long poll, capped by the
// server); the answer's Done says which. ErrNotFound for an unknown id.
func (c *Client) AuditRun(ctx context.Context, id uint64, wait time.Duration) (AuditRun, error) {
	var v url.Values
	if wait > 0 {
		v = url.Values{"wait": {"1"}, "timeout": {wait.String()}}
	}
	var r AuditRun
	err := c.getJSON(ctx, "/v1/audit/runs/"+strconv.FormatUint(id, 10), v, &r)
	return r, err
}

// AuditStatus returns what the audit does.
func (c *Client) AuditStatus(ctx context.Context) (AuditStatus, error) {
	var s AuditStatus
	err := c.getJSON(ctx, "/v1/audit/status", nil, &s)
	return s, err
}

// AuditHistory returns the passes the audit completed, oldest first.
func (c *Client) AuditHistory(ctx context.Context) ([]AuditPassSummary, error) {
	var h AuditHistory
	err := c.getJSON(ctx, "/v1/audit/history", nil, &h)
	return h.Passes, err
}

// AuditProblems calls fn for each file the audit found not ok.
func (c *Client) AuditProblems(ctx context.Context, fn func(AuditProblem) error) error {
	resp, err := c.do(ctx, "GET", "/v1/audit/problems", nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return readStream(resp.Body, func(line []byte) error {
		var p AuditProblem
		if err := json.Unmarshal(line, &p); err != nil {
			return fmt.Errorf("%w: %v", ErrBadResponse, err)
		}
		return fn(p)
	}, nil)
}

// AuditPause pauses the audit until AuditResume, across restarts, and
// returns the status after.
func (c *Client) AuditPause(ctx context.Context) (AuditStatus, error) {
	var s AuditStatus
	err := c.postJSON(ctx, "/v1/audit/pause", nil, nil, &s)
	return s, err
}

// AuditResume lets scheduled runs start again.
func (c *Client) AuditResume(ctx context.Context) (AuditStatus, error) {
	var s AuditStatus
	err := c.postJSON(ctx, "/v1/audit/resume", nil, nil, &s)
	return s, err
}

// AuditAccept takes the content the flagged files at or below path have
// now. ErrNotFound when nothing there is flagged.
func (c *Client) AuditAccept(ctx context.Context, path []byte) (AuditAcceptResult, error) {
	var r AuditAcceptResult
	err := c.postJSON(ctx, "/v1/audit/accept", pathQuery(path), nil, &r)
	return r, err
}

func (c *Client) postJSON(ctx context.Context, p string, v url.Values, body []byte, out any) error {
	return c.doJSON(ctx, "POST", p, v, body, out)
}
