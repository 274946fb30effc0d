package mbsha256_test

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/annexd/annexd/hasher/mbsha256"
)

func ExampleEngine_SumMany() {
	e := mbsha256.New()
	sums := e.SumMany([][]byte{[]byte("abc"), nil})
	fmt.Printf("%x\n%x\n", sums[0], sums[1])
	// Output:
	// ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
	// e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
}

// A pool worker hands its queued files, largest first, to its own Engine and
// records each digest as soon as it is known.
func ExampleEngine_Hash() {
	queue := []io.Reader{strings.NewReader("abc"), strings.NewReader(""), strings.NewReader("hello\n")}
	e := mbsha256.New()
	next := func() (io.Reader, bool) {
		if len(queue) == 0 {
			return nil, false
		}
		r := queue[0]
		queue = queue[1:]
		return r, true
	}
	sums := make([]string, 3)
	err := e.Hash(context.Background(), next, func(i int, r mbsha256.Result) {
		if r.Err != nil {
			sums[i] = "error: " + r.Err.Error()
			return
		}
		sums[i] = fmt.Sprintf("%d bytes %x", r.Size, r.Sum[:4])
	})
	fmt.Println(err)
	fmt.Println(strings.Join(sums, "\n"))
	// Output:
	// <nil>
	// 3 bytes ba7816bf
	// 0 bytes e3b0c442
	// 6 bytes 5891b5b5
}
