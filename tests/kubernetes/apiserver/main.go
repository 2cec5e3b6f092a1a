// The Kubernetes API server of gpubox's Kubernetes backend tests
// (tests/kubernetes/cluster.py): the real kube-apiserver of k8s.io/kubernetes
// (cmd/kube-apiserver/app) over an embedded etcd, both on loopback, in one
// process. No controller-manager, scheduler or kubelet: Pods stay as written
// and nothing collects dependents (tests/kubernetes/controller.py plays those).
//
// Usage: kube-apiserver [-kubeconfig PATH] [-data-dir DIR]
//
// Once /readyz answers 200 it writes PATH (a kubeconfig whose bearer token is
// in group system:masters) and prints "READY <url>" on stdout. It serves until
// SIGTERM or SIGINT and exits 0. DIR holds etcd's data and the certificates;
// by default a temporary directory, removed at exit.
package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
	_ "time/tzdata"

	"go.etcd.io/etcd/server/v3/embed"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func fatal(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube-apiserver:", err)
		os.Exit(1)
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	fatal(err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startEtcd(dir string) (*embed.Etcd, string) {
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.LogLevel = "error"
	cfg.TickMs, cfg.ElectionMs = 10, 100 // one member: elect it at once
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", freePort())}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", freePort())}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	etcd, err := embed.StartEtcd(cfg)
	fatal(err)
	select {
	case <-etcd.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		fatal(fmt.Errorf("etcd did not become ready in 60 s"))
	}
	return etcd, client.String()
}

// announce waits for /readyz, then writes the kubeconfig (through a rename,
// so a reader never sees half of it) and prints READY. The kubeconfig trusts
// the server's self-signed certificate (its file holds the certificate and
// the CA that signed it, for 127.0.0.1), so clients verify TLS as usual.
func announce(base, token, certFile, kubeconfig string) {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // its own self-signed certificate
	for {
		time.Sleep(50 * time.Millisecond)
		r, err := hc.Get(base + "/readyz")
		if err != nil {
			continue
		}
		r.Body.Close()
		if r.StatusCode == http.StatusOK {
			break
		}
	}
	if kubeconfig != "" {
		cert, err := os.ReadFile(certFile)
		fatal(err)
		text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: gpubox-test
  cluster: {server: %q, certificate-authority-data: %q}
users:
- name: gpubox-test
  user: {token: %q}
contexts:
- name: gpubox-test
  context: {cluster: gpubox-test, user: gpubox-test, namespace: default}
current-context: gpubox-test
`, base, base64.StdEncoding.EncodeToString(cert), token)
		fatal(os.WriteFile(kubeconfig+".tmp", []byte(text), 0o600))
		fatal(os.Rename(kubeconfig+".tmp", kubeconfig))
	}
	fmt.Printf("READY %s\n", base)
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "where to write the kubeconfig once ready")
	dataDir := flag.String("data-dir", "", "etcd's data and the certificates (default: a temporary directory, removed at exit)")
	flag.Parse()
	dir := *dataDir
	if dir == "" {
		d, err := os.MkdirTemp("", "gpubox-kube-apiserver-")
		fatal(err)
		dir = d
		defer os.RemoveAll(d)
	} else {
		fatal(os.MkdirAll(dir, 0o700))
	}

	etcd, etcdURL := startEtcd(dir)
	defer etcd.Close()

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	fatal(err)
	keyFile := filepath.Join(dir, "service-account.key")
	fatal(os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY",
		Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600))
	secret := make([]byte, 16)
	_, err = rand.Read(secret)
	fatal(err)
	token := hex.EncodeToString(secret)
	tokenFile := filepath.Join(dir, "tokens.csv")
	fatal(os.WriteFile(tokenFile, []byte(token+`,admin,admin,"system:masters"`+"\n"), 0o600))

	port := freePort()
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	certDir := filepath.Join(dir, "certs")
	go announce(base, token, filepath.Join(certDir, "apiserver.crt"), *kubeconfig)

	cmd := app.NewAPIServerCommand()
	cmd.SetArgs([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none", // the lease reconciler refuses a loopback advertise address
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + certDir,
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + keyFile,
		"--service-account-signing-key-file=" + keyFile,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--disable-admission-plugins=ServiceAccount", // no token controller mints the default account's token
		"--enable-priority-and-fairness=false",
		"--v=0",
	})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The command installs its own signal handler, which exits the process on
	// a second signal and returns an error on the first; ours only decides
	// the exit code: an ended server after a signal is a clean exit.
	err = cmd.ExecuteContext(ctx)
	if ctx.Err() == nil && err != nil {
		fmt.Fprintln(os.Stderr, "kube-apiserver:", err)
		etcd.Close()
		if *dataDir == "" {
			os.RemoveAll(dir)
		}
		os.Exit(1)
	}
}
