package fsstat

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	ID     int    // mount id (reused after an unmount)
	Parent int    // the parent mount's id
	Dev    uint64 // st_dev of the files on it
	Root   string // the directory of the file system mounted here
	Point  string // where it is mounted
	Type   string // file system type, e.g. "ext4", "nfs4", "fuse.sshfs"
	Source string // e.g. "/dev/sda1", "server:/export"
}

// Mounts reads the mount table of this process's mount namespace.
func Mounts() ([]Mount, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMountinfo(b), nil
}

// parseMountinfo parses mountinfo(5) text; lines it cannot read are left out.
func parseMountinfo(b []byte) []Mount {
	var out []Mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m, ok := parseMountLine(sc.Text()); ok {
			out = append(out, m)
		}
	}
	return out
}

// parseMountLine parses "36 35 98:0 /mnt1 /mnt/parent rw master:1 - ext3
// /dev/root rw": the optional fields end at "-".
func parseMountLine(line string) (Mount, bool) {
	f := strings.Fields(line)
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || sep+1 >= len(f) {
		return Mount{}, false
	}
	id, err1 := strconv.Atoi(f[0])
	parent, err2 := strconv.Atoi(f[1])
	maj, min, ok := strings.Cut(f[2], ":")
	ma, err3 := strconv.ParseUint(maj, 10, 32)
	mi, err4 := strconv.ParseUint(min, 10, 32)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || !ok {
		return Mount{}, false
	}
	m := Mount{ID: id, Parent: parent, Dev: unix.Mkdev(uint32(ma), uint32(mi)),
		Root: unescapeMount(f[3]), Point: unescapeMount(f[4]), Type: f[sep+1]}
	if sep+2 < len(f) {
		m.Source = unescapeMount(f[sep+2])
	}
	return m, true
}

// unescapeMount undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// WatchMounts calls changed once it watches the mount table, and then each
// time the table changes (a mount or an unmount, in this mount namespace),
// until ctx ends; it returns nil then. A caller that reads the table in
// changed misses no change. The kernel signals a change of /proc/self/mountinfo with POLLPRI,
// so a quiet mount table costs no wake-ups. Before changed runs, the
// file-system ids cached per device are forgotten: a device number may
// now belong to another file system.
func WatchMounts(ctx context.Context, changed func()) error {
	// A raw descriptor: one in Go's poller would be polled by its epoll
	// too, and that poll takes the change before this one sees it.
	fd, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: "/proc/self/mountinfo", Err: err}
	}
	defer unix.Close(fd)
	stop, err := newWaker()
	if err != nil {
		return err
	}
	defer stop.close()
	done := context.AfterFunc(ctx, stop.wake)
	defer done()
	changed()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}, {Fd: int32(stop.r), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0 {
			forgetDevices()
			changed()
		}
	}
}

// waker is a pipe whose write end wakes a poll on its read end.
type waker struct{ r, w int }

func newWaker() (*waker, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, err
	}
	return &waker{r: p[0], w: p[1]}, nil
}

func (w *waker) wake() { unix.Write(w.w, []byte{0}) }

func (w *waker) close() {
	unix.Close(w.r)
	unix.Close(w.w)
}
