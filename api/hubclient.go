package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strconv"

	"github.com/annexd/annexd/key"
)

// HubWhereisKey asks which hosts hold k's content.
func (c *Client) HubWhereisKey(ctx context.Context, k key.Key) (HubContent, error) {
	return c.hubWhereis(ctx, url.Values{"key": {k.String()}})
}

// HubWhereisPath asks which hosts hold the content the file at path has
// now. A path without a current key is an error wrapping ErrNotFound.
func (c *Client) HubWhereisPath(ctx context.Context, path []byte, wait bool) (HubContent, error) {
	v := pathQuery(path)
	if wait {
		v.Set("wait", "1")
	}
	return c.hubWhereis(ctx, v)
}

func (c *Client) hubWhereis(ctx context.Context, v url.Values) (HubContent, error) {
	var hc HubContent
	err := c.getJSON(ctx, "/v1/hub/whereis", v, &hc)
	return hc, hubError(err)
}

// HubDups calls fn for each content held by two hosts or more, largest
// first. When q.Limit items came and more may follow, next resumes them.
func (c *Client) HubDups(ctx context.Context, q HubDupsQuery, fn func(HubContent) error) (next []byte, err error) {
	v := pageQuery(q.After, q.Limit)
	if q.MinSize > 0 {
		v.Set("min_size", strconv.FormatInt(q.MinSize, 10))
	}
	return c.hubList(ctx, "/v1/hub/dups", v, fn)
}

// HubCopies calls fn for each content held by fewer than q.FewerThan
// fresh hosts.
func (c *Client) HubCopies(ctx context.Context, q HubCopiesQuery, fn func(HubContent) error) (next []byte, err error) {
	v := pageQuery(q.After, q.Limit)
	if q.Path != nil {
		maps.Copy(v, pathQuery(q.Path))
	}
	v.Set("fewer_than", strconv.Itoa(q.FewerThan))
	if q.AllHosts {
		v.Set("all_hosts", "1")
	}
	return c.hubList(ctx, "/v1/hub/copies", v, fn)
}

// HubHosts lists the hosts the hub knows.
func (c *Client) HubHosts(ctx context.Context) ([]HubHost, error) {
	var h HubHosts
	err := c.getJSON(ctx, "/v1/hub/hosts", nil, &h)
	return h.Hosts, hubError(err)
}

func pageQuery(after []byte, limit int) url.Values {
	v := url.Values{}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	if after != nil {
		v.Set("after", base64.RawURLEncoding.EncodeToString(after))
	}
	return v
}

func (c *Client) hubList(ctx context.Context, p string, v url.Values, fn func(HubContent) error) ([]byte, error) {
	resp, err := c.do(ctx, "GET", p, v, nil)
	if err != nil {
		return nil, hubError(err)
	}
	defer resp.Body.Close()
	var end StreamEnd
	err = readStream(resp.Body, func(line []byte) error {
		var hc HubContent
		if err := hc.UnmarshalJSON(line); err != nil {
			return fmt.Errorf("%w: %v", ErrBadResponse, err)
		}
		return fn(hc)
	}, &end)
	if err != nil || end.Next == "" {
		return nil, hubError(err)
	}
	next, err := base64.RawURLEncoding.DecodeString(end.Next)
	if err != nil {
		return nil, fmt.Errorf("%w: next cursor: %v", ErrBadResponse, err)
	}
	return next, nil
}

// hubError makes the hub's error codes errors.Is ErrNoHub and
// ErrHubUnreachable.
func hubError(err error) error {
	var se *StatusError
	if !errors.As(err, &se) {
		return err
	}
	switch se.Code {
	case CodeNoHub:
		return hubStatusError{se, ErrNoHub}
	case CodeHubUnreachable:
		return hubStatusError{se, ErrHubUnreachable}
	}
	return err
}

// hubStatusError is a StatusError that is also one of the hub's sentinels.
type hubStatusError struct {
	*StatusError
	kind error
}

func (e hubStatusError) Is(target error) bool { return target == e.kind || e.StatusError.Is(target) }

func (e hubStatusError) Unwrap() error { return e.StatusError }
