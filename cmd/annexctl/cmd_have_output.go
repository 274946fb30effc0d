package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/hasher"
)

// What have says of a file, worst last.
const (
	haveHere       = "here"      // a copy in the index holds it now
	haveAbsent     = "absent"    // only on a file system that is not mounted now
	haveElsewhere  = "elsewhere" // only on another host
	haveMissing    = "missing"   // nowhere the index or the hub knows
	haveUnreadable = "error"     // the file could not be read and hashed
)

// verdict is what have says of f.
func (f *haveFile) verdict() string {
	switch {
	case f.err != nil:
		return haveUnreadable
	case f.firstCopy(func(c api.HaveCopy) bool { return !c.Stale && c.Absent == nil }) != nil:
		return haveHere
	case f.firstCopy(func(c api.HaveCopy) bool { return c.Absent != nil }) != nil:
		return haveAbsent
	case f.hub != nil && len(f.hub.Holders) > 0:
		return haveElsewhere
	}
	return haveMissing
}

func (f *haveFile) firstCopy(ok func(api.HaveCopy) bool) *api.HaveCopy {
	for i := range f.copies {
		if ok(f.copies[i]) {
			return &f.copies[i]
		}
	}
	return nil
}

// askHub asks the hub about each file that is neither here nor absent.
// It returns api.ErrNoHub without a hub link, and the hub's error when it
// cannot be asked.
func askHub(ctx context.Context, c *api.Client, chunk []haveFile) error {
	self := ""
	for i := range chunk {
		f := &chunk[i]
		if v := f.verdict(); v != haveMissing {
			continue
		}
		hc, err := c.HubWhereisKey(ctx, f.key)
		if err != nil {
			return err
		}
		if self == "" {
			self = hubName(ctx, c)
		}
		hc.Holders = othersOnly(hc.Holders, self)
		f.hub = &hc
	}
	return nil
}

// hubName is this host's name at the hub, "" when not known.
func hubName(ctx context.Context, c *api.Client) string {
	st, err := c.Status(ctx)
	if err != nil || st.Hub == nil {
		return ""
	}
	return st.Hub.Name
}

// othersOnly drops this host's own entry: what this host holds the
// index has answered already, and a hub that lags may still list it.
func othersOnly(hs []api.HubHolder, self string) []api.HubHolder {
	var out []api.HubHolder
	for _, h := range hs {
		if h.Host != self || self == "" {
			out = append(out, h)
		}
	}
	return out
}

// haveOut prints the answers and counts what the exit status needs.
type haveOut struct {
	o                   haveOpts
	w                   *bufio.Writer
	stderr              io.Writer
	missing, unreadable int
}

func newHaveOut(cmd *cobra.Command, o haveOpts) *haveOut {
	return &haveOut{o: o, w: bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10), stderr: cmd.ErrOrStderr()}
}

// print writes one chunk's answers and flushes them.
func (h *haveOut) print(chunk []haveFile) error {
	for i := range chunk {
		f := &chunk[i]
		v := f.verdict()
		switch v {
		case haveUnreadable:
			h.unreadable++
			h.w.Flush()
			fmt.Fprintf(h.stderr, "annexctl: have: %s\n", haveMessage(f.name, f.err))
		case haveMissing:
			h.missing++
		}
		if h.o.missing && v != haveMissing {
			continue
		}
		h.line(f, v)
	}
	if err := flushOut(h.w); err != nil {
		return err
	}
	return nil
}

// line writes one file's answer in the chosen format.
func (h *haveOut) line(f *haveFile, v string) {
	end := byte('\n')
	if h.o.nul {
		end = 0
	}
	switch {
	case h.o.json:
		h.w.Write(append(f.appendJSON(nil, v), '\n'))
	case h.o.missing:
		h.w.WriteString(f.name)
		h.w.WriteByte(end)
	case h.o.nul:
		h.w.WriteString(v + "\t" + f.name)
		h.w.WriteByte(0)
	case v != haveUnreadable:
		h.w.WriteString(fmt.Sprintf("%-9s %s%s\n", v+":", printableName(f.name), f.where(v)))
	}
}

// where says where the content of f is, for people.
func (f *haveFile) where(v string) string {
	switch v {
	case haveHere:
		c := f.firstCopy(func(c api.HaveCopy) bool { return !c.Stale && c.Absent == nil })
		return " -> " + printableName(string(c.Path)) + more(len(f.copies)-1)
	case haveAbsent:
		c := f.firstCopy(func(c api.HaveCopy) bool { return c.Absent != nil })
		return " -> " + printableName(string(c.Path)) + " (" + absentNote(c.Absent) + ")" + more(len(f.copies)-1)
	case haveElsewhere:
		hd := f.hub.Holders[0]
		s := " -> " + hd.Host
		if len(hd.Paths) > 0 {
			s += ":" + printableName(string(hd.Paths[0]))
		}
		if hd.Stale {
			s += " (stale host)"
		}
		return s + more(len(f.hub.Holders)-1)
	}
	if c := f.firstCopy(func(c api.HaveCopy) bool { return c.Stale }); c != nil {
		return " (" + printableName(string(c.Path)) + " had it, but changed since it was indexed)"
	}
	return ""
}

func more(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" (+%d more)", n)
}

// absentNote says which file system holds an absent copy.
func absentNote(fs *api.RememberedFS) string {
	parts := []string{"not mounted: " + strings.TrimSpace(fs.Type+" "+fs.Key)}
	if fs.Point != "" {
		parts = append(parts, "last mounted at "+fs.Point)
	}
	if !fs.LastSeen.IsZero() {
		parts = append(parts, "last seen "+fs.LastSeen.Local().Format(time.DateTime))
	}
	return strings.Join(parts, "; ")
}

// appendJSON appends f's answer as one JSON object.
func (f *haveFile) appendJSON(buf []byte, v string) []byte {
	buf = append(buf, '{')
	buf = api.AppendPathJSON(buf, "path", []byte(f.name))
	buf = append(buf, `,"state":"`+v+`"`...)
	if f.err != nil {
		msg, _ := json.Marshal(haveMessage(f.name, f.err))
		return append(append(append(buf, `,"error":`...), msg...), '}')
	}
	k, _ := json.Marshal(f.key.String())
	buf = append(append(buf, `,"key":`...), k...)
	buf = append(buf, `,"copies":[`...)
	for i, c := range f.copies {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = c.AppendJSON(buf)
	}
	buf = append(buf, ']')
	if f.hub != nil {
		hb, _ := json.Marshal(f.hub)
		buf = append(append(buf, `,"hub":`...), hb...)
	}
	return append(buf, '}')
}

// status is the exit status: 5 when a file could not be read, else 1
// when some content is missing.
func (h *haveOut) status() error {
	switch {
	case h.unreadable > 0:
		return &exitError{Code: exitUnreadable}
	case h.missing > 0:
		return &exitError{Code: exitFailure}
	}
	return nil
}

// haveMessage words why the file at path could not be hashed.
func haveMessage(path string, err error) string {
	var nr *hasher.NotRegularError
	if errors.As(err, &nr) {
		return fmt.Sprintf("%s: is a %s; have reads regular files (and folders) only", printableName(path), nr.Type)
	}
	return calckeyMessage(path, err)
}
