// golat: 200-byte ping-pong through mtproxy (dd client) and the fake DC it reaches, in Go.
//
// The same exchange as bench_load's `small` workload, from a Go program so that the load tool's
// waiting is Go's runtime (goroutines parked on the netpoller, its spinning before the M
// sleeps) rather than our C loop's epoll_wait:
//   - the DC: listens on -dc-port; reads the proxy's obfuscated2 header (raw keys, no secret)
//     and the 16-byte hello, then echoes every byte it decrypts, re-encrypted;
//   - the clients: -conns connections to -proxy-port (or straight to the DC with -direct, keyed
//     as the proxy would key them: the baseline), obfuscated2 with the 0xdddddddd tag keyed by
//     the dd secret (key = SHA-256(material || secret), AES-256-CTR), DC 2; each sends a
//     200-byte message (u64 seq | u64 send time | pattern), waits for its echo, checks every
//     byte, records the round trip, and sends the next.
//     -direct with -proxy-port: keyed as for the DC but dialing -proxy-port, where a plain TCP
//     relay (haproxy in latency.sh --floor) forwards to the DC.
//
// Output (one line, also to -lat-file): p50 p99 p999 (us), round trips, proxy CPU seconds
// over the window (from /proc/PID/stat with -proxy-pid; -1 without), window seconds.
// Standard library only (no modules to fetch); builds with Go 1.19 (Debian 12's golang-go).
package main

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	hdrLen   = 64
	helloLen = 16
	tagDD    = 0xdddddddd
)

type dir struct{ key, iv []byte }

// derive returns the initiator->responder and responder->initiator keys of a header
// (PROTOCOL.md 1.1): material H[8..56) and its byte reversal; with a secret each key is
// SHA-256(key material || secret).
func derive(h []byte, secret []byte) (fwd, rev dir) {
	m := h[8:56]
	r := make([]byte, 48)
	for i := range r {
		r[i] = m[47-i]
	}
	mk := func(x []byte) dir {
		d := dir{key: append([]byte(nil), x[:32]...), iv: append([]byte(nil), x[32:48]...)}
		if secret != nil {
			s := sha256.Sum256(append(append([]byte(nil), x[:32]...), secret...))
			d.key = s[:]
		}
		return d
	}
	return mk(m), mk(r)
}

func ctr(d dir) cipher.Stream {
	b, err := aes.NewCipher(d.key)
	if err != nil {
		panic(err)
	}
	return cipher.NewCTR(b, d.iv)
}

// forbidden: a plain header an initiator must not send (PROTOCOL.md 1.2).
func forbidden(h []byte) bool {
	if h[0] == 0xef {
		return true
	}
	switch binary.LittleEndian.Uint32(h) {
	case 0x44414548, 0x54534f50, 0x20544547, 0x4954504f, 0xdddddddd, 0xeeeeeeee, 0x02010316:
		return true
	}
	return binary.LittleEndian.Uint32(h[4:]) == 0
}

type conn struct {
	c        net.Conn
	enc, dec cipher.Stream
}

// dial connects a client and sends the sealed header and the hello.
func dial(port int, secret []byte, idx uint32) (*conn, error) {
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return nil, err
	}
	h := make([]byte, hdrLen)
	for {
		if _, err := rand.Read(h); err != nil {
			return nil, err
		}
		binary.LittleEndian.PutUint32(h[56:], tagDD)
		binary.LittleEndian.PutUint16(h[60:], 2)
		if !forbidden(h) {
			break
		}
	}
	fwd, rev := derive(h, secret)
	cc := &conn{c: c, enc: ctr(fwd), dec: ctr(rev)}
	out := make([]byte, hdrLen+helloLen)
	cc.enc.XORKeyStream(out[:hdrLen], h)
	copy(out[:56], h[:56]) // plain up to the tag, encrypted tag, dc and padding
	hello := out[hdrLen:]
	copy(hello, "BLD1")
	binary.LittleEndian.PutUint32(hello[4:], idx)
	binary.LittleEndian.PutUint64(hello[8:], uint64(time.Now().UnixNano()))
	cc.enc.XORKeyStream(hello, hello)
	if _, err := c.Write(out); err != nil {
		c.Close()
		return nil, err
	}
	return cc, nil
}

// serveDC: one accepted proxy (or direct client) connection: header, hello, then echo.
func serveDC(c net.Conn, errs *int64) {
	defer c.Close()
	in := make([]byte, hdrLen+helloLen)
	if _, err := io.ReadFull(c, in); err != nil {
		return
	}
	fwd, rev := derive(in, nil)
	dec, enc := ctr(fwd), ctr(rev)
	dec.XORKeyStream(in, in)
	if string(in[hdrLen:hdrLen+4]) != "BLD1" || binary.LittleEndian.Uint32(in[56:]) != tagDD {
		atomic.AddInt64(errs, 1)
		fmt.Fprintln(os.Stderr, "golat: DC: bad header or hello (wrong keys?)")
		return
	}
	buf := make([]byte, 65536)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			dec.XORKeyStream(buf[:n], buf[:n])
			enc.XORKeyStream(buf[:n], buf[:n])
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// proxyCPU: utime + stime of PID in seconds, or -1.
func proxyCPU(pid int) float64 {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return -1
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

func pct(v []int64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return float64(v[int(p*float64(len(v)-1)+0.5)]) / 1000
}

func main() {
	proxyPort := flag.Int("proxy-port", 0, "mtproxy's port on 127.0.0.1")
	dcPort := flag.Int("dc-port", 0, "port the fake DC listens on (the proxy's DC 2)")
	secretHex := flag.String("secret", "", "dd secret: dd + 32 hex digits (or the 32 alone)")
	conns := flag.Int("conns", 1, "connections, one message in flight on each")
	seconds := flag.Float64("seconds", 2, "timed window")
	warm := flag.Float64("warmup", 0.3, "seconds of ping-pong before the window")
	msgLen := flag.Int("msg", 200, "message size (>= 24)")
	direct := flag.Bool("direct", false, "clients key their stream as the proxy would for the DC and dial "+
		"the DC (the baseline), or -proxy-port if given (a plain TCP relay in front of the DC)")
	pid := flag.Int("proxy-pid", 0, "proxy pid for its CPU seconds over the window")
	latFile := flag.String("lat-file", "", "write the result line here too")
	flag.Parse()
	s := strings.TrimPrefix(strings.ToLower(*secretHex), "dd")
	secret, err := hex.DecodeString(s)
	if (*proxyPort == 0 && !*direct) || *dcPort == 0 || err != nil || len(secret) != 16 ||
		*conns < 1 || *msgLen < 24 {
		fmt.Fprintln(os.Stderr, "usage: golat -proxy-port N -dc-port N -secret ddHEX32 "+
			"[-conns N] [-seconds S] [-direct] [-proxy-pid PID] [-lat-file F]")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(*dcPort))
	if err != nil {
		fmt.Fprintln(os.Stderr, "golat: DC listen:", err)
		os.Exit(1)
	}
	var errs int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveDC(c, &errs)
		}
	}()
	port, key := *proxyPort, secret
	if *direct { // keyed as the proxy keys its DC side
		key = nil
		if port == 0 { // -proxy-port with -direct: a plain TCP relay in front of the DC
			port = *dcPort
		}
	}
	cs := make([]*conn, *conns)
	for i := range cs {
		if cs[i], err = dial(port, key, uint32(i)); err != nil {
			fmt.Fprintln(os.Stderr, "golat: connect:", err)
			os.Exit(1)
		}
	}
	var measuring, stop int32
	lats := make([][]int64, *conns)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func(i int, c *conn) {
			defer wg.Done()
			msg, want, got := make([]byte, *msgLen), make([]byte, *msgLen), make([]byte, *msgLen)
			for j := 16; j < *msgLen; j++ {
				want[j] = byte(i*31 + j)
			}
			for seq := uint64(0); atomic.LoadInt32(&stop) == 0; seq++ {
				t0 := time.Now()
				binary.LittleEndian.PutUint64(want, seq)
				binary.LittleEndian.PutUint64(want[8:], uint64(t0.UnixNano()))
				c.enc.XORKeyStream(msg, want)
				if _, err := c.c.Write(msg); err != nil {
					atomic.AddInt64(&errs, 1)
					fmt.Fprintln(os.Stderr, "golat: write:", err)
					return
				}
				if _, err := io.ReadFull(c.c, got); err != nil {
					atomic.AddInt64(&errs, 1)
					fmt.Fprintln(os.Stderr, "golat: read:", err)
					return
				}
				rtt := time.Since(t0)
				c.dec.XORKeyStream(got, got)
				if !bytes.Equal(got, want) {
					atomic.AddInt64(&errs, 1)
					fmt.Fprintln(os.Stderr, "golat: echo mismatch")
					return
				}
				if atomic.LoadInt32(&measuring) == 1 {
					lats[i] = append(lats[i], rtt.Nanoseconds())
				}
			}
		}(i, c)
	}
	time.Sleep(time.Duration(*warm * float64(time.Second)))
	cpu0 := proxyCPU(*pid)
	t0 := time.Now()
	atomic.StoreInt32(&measuring, 1)
	time.Sleep(time.Duration(*seconds * float64(time.Second)))
	atomic.StoreInt32(&measuring, 0)
	window := time.Since(t0).Seconds()
	cpu1 := proxyCPU(*pid)
	atomic.StoreInt32(&stop, 1)
	for _, c := range cs {
		c.c.SetDeadline(time.Now().Add(2 * time.Second)) // a lost echo must not hang us
	}
	wg.Wait()
	ln.Close()
	var all []int64
	for _, l := range lats {
		all = append(all, l...)
	}
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	cpu := -1.0
	if cpu0 >= 0 && cpu1 >= 0 {
		cpu = cpu1 - cpu0
	}
	line := fmt.Sprintf("%.1f %.1f %.1f %d %.3f %.3f", pct(all, 0.5), pct(all, 0.99),
		pct(all, 0.999), len(all), cpu, window)
	fmt.Println(line)
	if *latFile != "" {
		if err := os.WriteFile(*latFile, []byte(line+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "golat:", err)
			os.Exit(1)
		}
	}
	if n := atomic.LoadInt64(&errs); n > 0 || len(all) == 0 {
		fmt.Fprintf(os.Stderr, "golat: %d errors, %d round trips\n", n, len(all))
		os.Exit(1)
	}
}
