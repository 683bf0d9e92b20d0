# ferry-writer on Nomad: run in the TARGET region, next to the target Kafka
# cluster. Guide: docs/deploy.md; every Ferry key: docs/configuration.md.
# Values marked CHANGE are placeholders.
#
#   nomad var put nomad/jobs/ferry-writer tls_crt=@writer.pem tls_key=@writer-key.pem ca_crt=@ca.pem
#   nomad job run deploy/nomad/ferry-writer.nomad.hcl
#
# The image is not published by this repository: build it from
# `make build` (docs/deploy.md).
#
# Consul registration: Nomad registers the writer (the service block below,
# check on the admin /readyz), and the writer's own `registration` setting
# stays off. Nomad knows the address fetchers can reach (the node's IP and
# the allocated host port), while Ferry's self-registration would advertise
# its listen address as seen inside the container and have Consul check
# its admin address from the agent's network, which only works when the
# agent shares the task's network. Both deregister before the drain
# starts: Nomad at the start of the stop, then shutdown_delay, then
# SIGTERM. Fetchers find the passing instances with writers.consul.
job "ferry-writer" {
  datacenters = ["west"] # CHANGE: the target region's datacenters
  type        = "service"

  update {
    max_parallel      = 1
    health_check      = "checks"
    min_healthy_time  = "10s"
    healthy_deadline  = "3m"
    progress_deadline = "10m"
    auto_revert       = true
  }

  group "writer" {
    count = 2 # any writer can serve any shard, so writers scale freely

    # Bounds for `nomad job scale` and the Nomad Autoscaler (add a policy
    # block for it, on CPU: docs/deploy.md "Scaling"). A shard is served by
    # one writer at a time, so the links' shards (16) bound the useful
    # writers.
    scaling {
      enabled = true
      min     = 2 # fetchers move a lost writer's shards to the other
      max     = 16
    }

    # One writer per host where there are hosts enough (soft: Nomad still
    # places both on one host rather than none).
    spread {
      attribute = "${node.unique.id}"
    }

    network {
      # Dynamic host ports mapped to the ports in writer.yaml; fetchers
      # learn the host port from the Consul catalog.
      port "grpc" {
        to = 7400
      }
      port "admin" {
        to = 7401
      }
    }

    restart {
      attempts = 3
      interval = "5m"
      delay    = "15s"
      mode     = "delay"
    }

    service {
      name     = "ferry-writer" # the fetchers' writers.consul.service
      port     = "grpc"
      provider = "consul"

      check {
        name     = "ferry-writer ready"
        type     = "http"
        port     = "admin"
        path     = "/readyz"
        interval = "5s"
        timeout  = "2s"
      }
    }

    task "ferry-writer" {
      driver = "docker"
      user   = "65532:65532"

      config {
        image           = "ghcr.io/ferry-replicator/ferry-writer:VERSION" # CHANGE: your registry and tag
        args            = ["--config", "/local/writer.yaml"]
        ports           = ["grpc", "admin"]
        readonly_rootfs = true
        cap_drop        = ["all"]
      }

      # Deregistered from Consul first, then this pause so fetchers move
      # their shards off, then SIGTERM.
      shutdown_delay = "5s"
      # SIGTERM drains within shutdown_timeout (20s; docs/operations.md
      # "Shutdown"); 45s leaves room for the Kafka clients to close. Nomad
      # clients cap this at their max_kill_timeout (default 30s): raise it.
      kill_timeout = "45s"
      kill_signal  = "SIGTERM"

      env {
        # Settings from the environment are layered over the file
        # (FERRY_WRITER_<KEY>); an unknown name stops the process.
        FERRY_WRITER_ID = "writer-${NOMAD_ALLOC_ID}"
        GOMEMLIMIT      = "300MiB"
      }

      resources {
        cpu    = 500 # MHz
        memory = 192 # MiB, reserved
        # memory_max needs memory oversubscription enabled on the cluster.
        memory_max = 384
      }

      # The Ferry configuration. Plain YAML: nothing in it is interpolated
      # (no ${...}, no {{ }}), so the test in
      # services/writer/internal/config loads it as written; per-allocation
      # values come from the env block above.
      template {
        destination = "local/writer.yaml"
        change_mode = "restart" # read once at start
        data        = <<-EOF
          listen: 0.0.0.0:7400            # gRPC, the "grpc" port
          admin:
            listen: 0.0.0.0:7401          # the "admin" port: checks and /metrics
          log:
            level: info
            format: json
          tls:
            cert_file: /secrets/tls.crt
            key_file: /secrets/tls.key
            ca_file: /secrets/ca.crt
            allowed_ids: ["spiffe://prod.example/ferry/fetcher"]  # CHANGE: the fetchers' SPIFFE ID
          target:
            bootstrap_servers: ["kafka-west-1.example.internal:9092", "kafka-west-2.example.internal:9092"]  # CHANGE
          checkpoints:
            topic: __ferry_checkpoints
            replication_factor: 3         # CHANGE to your cluster's size
          links:
            - name: east-to-west          # CHANGE: the fetchers' link.name
              naming: prefix
              prefix: "east."
              delivery: exactly_once
              shards: 16                  # CHANGE with the fetchers' link.shards
          shutdown_timeout: 20s
        EOF
      }

      # mTLS material from Nomad Variables (see the command at the top).
      # Ferry also re-reads the files when they change; SIGHUP makes it
      # immediate. From Vault PKI instead (docs/deploy.md, "Certificates
      # from Vault"): add `vault { role = "ferry-writer" }` to the task and
      # give the three templates one identical issue call, the template
      # runner fetching it once so the files match:
      #   {{ with secret "pki/issue/ferry-writer" "common_name=ferry-writer"
      #     "uri_sans=spiffe://prod.example/ferry/writer" }}{{ .Data.certificate }}{{ end }}
      # (.Data.private_key, .Data.issuing_ca in the other two).
      template {
        destination   = "secrets/tls.crt"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = "{{ with nomadVar \"nomad/jobs/ferry-writer\" }}{{ .tls_crt }}{{ end }}"
      }
      template {
        destination   = "secrets/tls.key"
        perms         = "0600"
        uid           = 65532 # the task's user must read it
        gid           = 65532
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = "{{ with nomadVar \"nomad/jobs/ferry-writer\" }}{{ .tls_key }}{{ end }}"
      }
      template {
        destination   = "secrets/ca.crt"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = "{{ with nomadVar \"nomad/jobs/ferry-writer\" }}{{ .ca_crt }}{{ end }}"
      }
    }
  }
}
