# ferry-fetcher on Nomad: run in the SOURCE region, next to the source
# Kafka cluster. Guide: docs/deploy.md; every Ferry key:
# docs/configuration.md. Values marked CHANGE are placeholders.
#
#   nomad var put nomad/jobs/ferry-fetcher tls_crt=@fetcher.pem tls_key=@fetcher-key.pem ca_crt=@ca.pem \
#     consul_token=@consul-token
#   nomad job run deploy/nomad/ferry-fetcher.nomad.hcl
#
# The image is not published by this repository: build it from
# `make build` (docs/deploy.md).
#
# The fetchers of the link share its shards through Consul leases
# (lease.address) and find the writers in the target region's Consul
# catalog (writers.consul; the writer job registers them). Both go through
# the Consul agent on the node, whose HTTP API must listen on the node's
# address (Consul's client_addr), and the target datacenter must be
# reachable from it (WAN federation). Nomad registers the fetcher too, for
# its health only: nothing connects to a fetcher.
job "ferry-fetcher" {
  datacenters = ["east"] # CHANGE: the source region's datacenters
  type        = "service"

  update {
    max_parallel      = 1
    health_check      = "checks"
    min_healthy_time  = "10s"
    healthy_deadline  = "3m"
    progress_deadline = "10m"
    auto_revert       = true
  }

  group "fetcher" {
    # Fetchers share the shards (fair share: floor(shards / live), the
    # first shards % live one more); more than the non-empty shards idle.
    count = 3

    # Bounds for `nomad job scale` and the Nomad Autoscaler (add a policy
    # block for it, docs/deploy.md "Scaling"). Each shard has one owner, so
    # link.shards (16) bounds the useful fetchers: past it they idle.
    scaling {
      enabled = true
      min     = 2 # one can be lost while the other takes its shards
      max     = 16
    }

    # One fetcher per host where there are hosts enough, so losing a host
    # moves only its fetcher's shards (soft: Nomad still places all of
    # them on fewer hosts).
    spread {
      attribute = "${node.unique.id}"
    }

    network {
      port "admin" {
        to = 7402
      }
    }

    restart {
      attempts = 3
      interval = "5m"
      delay    = "15s"
      mode     = "delay"
    }

    service {
      name     = "ferry-fetcher"
      port     = "admin"
      provider = "consul"

      check {
        name     = "ferry-fetcher ready"
        type     = "http"
        port     = "admin"
        path     = "/readyz"
        interval = "5s"
        timeout  = "2s"
      }
    }

    task "ferry-fetcher" {
      driver = "docker"
      user   = "65532:65532"

      config {
        image           = "ghcr.io/ferry-replicator/ferry-fetcher:VERSION" # CHANGE: your registry and tag
        args            = ["--config", "/local/fetcher.yaml"]
        ports           = ["admin"]
        readonly_rootfs = true
        cap_drop        = ["all"]
      }

      # SIGTERM drains: stop reading, wait up to shutdown_timeout (20s) for
      # the writers' acknowledgements, release the leases, destroy the
      # session (docs/operations.md "Shutdown"). 45s leaves room for the
      # Kafka and Consul clients to close. Nomad clients cap this at their
      # max_kill_timeout (default 30s): raise it.
      kill_timeout = "45s"
      kill_signal  = "SIGTERM"

      env {
        # Settings from the environment are layered over the file
        # (FERRY_FETCHER_<KEY>); an unknown name stops the process.
        FERRY_FETCHER_ID                     = "fetcher-${NOMAD_ALLOC_ID}"
        FERRY_FETCHER_LEASE_ADDRESS          = "${attr.unique.network.ip-address}:8500"
        FERRY_FETCHER_WRITERS_CONSUL_ADDRESS = "${attr.unique.network.ip-address}:8500"
        GOMEMLIMIT                           = "360MiB"
      }

      resources {
        cpu    = 500 # MHz
        memory = 256 # MiB, reserved
        # memory_max needs memory oversubscription enabled on the cluster.
        memory_max = 448
      }

      # The Ferry configuration. Plain YAML: nothing in it is interpolated
      # (no ${...}, no {{ }}), so the test in
      # services/fetcher/internal/config loads it as written; per-allocation
      # values come from the env block above.
      template {
        destination = "local/fetcher.yaml"
        change_mode = "restart" # read once at start
        data        = <<-EOF
          admin:
            listen: 0.0.0.0:7402          # the "admin" port: checks and /metrics
          log:
            level: info
            format: json
          source:
            bootstrap_servers: ["kafka-east-1.example.internal:9092", "kafka-east-2.example.internal:9092"]  # CHANGE
          link:
            name: east-to-west            # CHANGE; the writers must list a link of this name
            topics:
              include: ["orders.*", "payments"]  # CHANGE
            shards: 16                    # fixed for the link's life
            max_buffered_bytes: 64MiB     # about 4 MiB per shard with data
          writers:
            consul:                       # address: FERRY_FETCHER_WRITERS_CONSUL_ADDRESS
              datacenter: west            # CHANGE: the target region's datacenter
              service: ferry-writer
              token_file: /secrets/consul-token  # service and node read
            tls:
              cert_file: /secrets/tls.crt
              key_file: /secrets/tls.key
              ca_file: /secrets/ca.crt
              allowed_ids: ["spiffe://prod.example/ferry/writer"]  # CHANGE: the writers' SPIFFE ID
          lease:                          # address: FERRY_FETCHER_LEASE_ADDRESS
            datacenter: east              # CHANGE: the source region's datacenter
            key_prefix: ferry
            session_ttl: 10s
            lock_delay: 5s
            # The Consul ACL token (KV write on ferry/, session write:
            # docs/security.md, "Consul: TLS and ACL tokens"), from the
            # template below; read at start, never logged. CHANGE: without
            # Consul ACLs, remove both token_file lines and that template.
            token_file: /secrets/consul-token
          shutdown_timeout: 20s
        EOF
      }

      # mTLS material from Nomad Variables (see the command at the top).
      # Ferry also re-reads the files when they change; SIGHUP makes it
      # immediate. From Vault PKI instead (docs/deploy.md, "Certificates
      # from Vault"): add `vault { role = "ferry-fetcher" }` to the task and
      # give the three templates one identical issue call, the template
      # runner fetching it once so the files match:
      #   {{ with secret "pki/issue/ferry-fetcher" "common_name=ferry-fetcher"
      #     "uri_sans=spiffe://prod.example/ferry/fetcher" }}{{ .Data.certificate }}{{ end }}
      # (.Data.private_key, .Data.issuing_ca in the other two).
      template {
        destination   = "secrets/tls.crt"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = "{{ with nomadVar \"nomad/jobs/ferry-fetcher\" }}{{ .tls_crt }}{{ end }}"
      }
      template {
        destination   = "secrets/tls.key"
        perms         = "0600"
        uid           = 65532 # the task's user must read it
        gid           = 65532
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = "{{ with nomadVar \"nomad/jobs/ferry-fetcher\" }}{{ .tls_key }}{{ end }}"
      }
      template {
        destination   = "secrets/ca.crt"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = "{{ with nomadVar \"nomad/jobs/ferry-fetcher\" }}{{ .ca_crt }}{{ end }}"
      }
      # The Consul ACL token, read at start: a new one restarts the task.
      template {
        destination = "secrets/consul-token"
        perms       = "0600"
        uid         = 65532
        gid         = 65532
        change_mode = "restart"
        data        = "{{ with nomadVar \"nomad/jobs/ferry-fetcher\" }}{{ .consul_token }}{{ end }}"
      }
    }
  }
}
