"""Settings shared by every RL Studio deployment; values come from `rlstudio.config.env`."""
from __future__ import annotations

import hashlib

from rlstudio.config.env import PLAYGROUND_MAX_ACTIVE_DEFAULT, REPO_ROOT, load_env, parse_database_url
from rlstudio.config.env import env_float as _env_float
from rlstudio.config.env import env_int as _env_int

ENV = load_env()
BASE_DIR = REPO_ROOT
STATE_DIR = ENV.state_dir
UPLOADS_DIR = STATE_DIR / "uploads"
CHECKPOINTS_DIR = STATE_DIR / "checkpoints"
RUNS_DIR = STATE_DIR / "runs"
SERVICES_DIR = STATE_DIR / "services"

# Development and tests get a key derived from the checkout path (stable across restarts, never
# shipped); production.py refuses to start without a real SECRET_KEY.
SECRET_KEY = ENV.secret_key or "dev-only-" + hashlib.sha256(str(BASE_DIR).encode()).hexdigest()
DEBUG = bool(ENV.debug)
ALLOWED_HOSTS = list(ENV.allowed_hosts)
CSRF_TRUSTED_ORIGINS = list(ENV.csrf_trusted_origins)

RLSTUDIO_VERSION = "0.1.0"
REDIS_URL = ENV.redis_url
RAY_ADDRESS = ENV.ray_address
RAY_DASHBOARD_URL = ENV.ray_dashboard_url
PORT = ENV.port

INSTALLED_APPS = [
    "daphne",  # first: its runserver serves ASGI (HTTP + WebSocket)
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",  # intcomma: counts with thousands separators on the pages (never the API)
    "rest_framework",
    "drf_spectacular",
    "channels",
    "rlstudio.accounts",
    "rlstudio.catalog",
    "rlstudio.runs",
    "rlstudio.telemetry",
    "rlstudio.quotas",
    "axes",  # login / API-token failure throttling (settings/web_hardening.py)
    "rlstudio.registry",
    "rlstudio.demo",
    "rlstudio.alerts",
    "rlstudio.evaluations",
    "rlstudio.playground",
    "rlstudio.exports",
    "rlstudio.sweeps",
    "rlstudio.projects",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",  # Content-Security-Policy (settings/web_hardening.py)
    "rlstudio.config.nul_guard.NulParameterMiddleware",  # a NUL in a parameter: 400 naming it
    "axes.middleware.AxesMiddleware",  # last: turns a locked-out login into the 429 page
]
# Database sessions whose cookie key is read only in the shape Django makes (a NUL in it was a 500).
SESSION_ENGINE = "rlstudio.accounts.sessions"

ROOT_URLCONF = "rlstudio.config.urls"
ASGI_APPLICATION = "rlstudio.config.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": parse_database_url(ENV.database_url)}
# Seconds a database connection is kept for reuse (RLSTUDIO_DB_CONN_MAX_AGE; 0 closes it after each
# request). Connections belong to threads: the ingest API's database work runs on the server's
# long-lived thread pool, and the websocket consumers on Channels' one sync thread, so those
# connections are reused instead of opening one (a PostgreSQL backend fork) per request. Sync views
# under ASGI get a fresh thread per request, whose connection goes with the thread. Celery closes
# its workers' stale ones between tasks. Health checks make a connection the database dropped
# visible before a request uses it, instead of failing that request.
_CONN_MAX_AGE = _env_int("RLSTUDIO_DB_CONN_MAX_AGE", 60)
if _CONN_MAX_AGE < 0:
    raise ValueError(f"RLSTUDIO_DB_CONN_MAX_AGE must be >= 0 seconds (got {_CONN_MAX_AGE})")
DATABASES["default"]["CONN_MAX_AGE"] = _CONN_MAX_AGE
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "runs:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
MEDIA_ROOT = UPLOADS_DIR

# Channels: Redis pub/sub (channels_redis.pubsub). The default layer (channels_redis.core) pushes a
# group message once per member channel, one Redis round trip per viewer (most of Daphne's CPU with
# 100 viewers), and drops past `capacity`; pub/sub publishes once per group and each process hands the
# message to its own consumers. What channels_redis 4.3's pub/sub layer does (read from its source):
# - group_add sends SUBSCRIBE and returns without waiting for Redis's reply (redis-py sends pub/sub
#   commands and reads replies only in the layer's receive task);
# - messages for a consumer busy elsewhere (e.g. a replay) queue in an unbounded asyncio.Queue in its
#   process: nothing is dropped for capacity (there is none), memory grows instead;
# - delivery is at most once: while the subscriber connection is down (Redis restart) messages are
#   lost; the receive task logs, retries every second, reconnects and resubscribes (redis-py), but
#   tells no consumer (`on_disconnect`/`on_reconnect` are accepted and never called). RunConsumer
#   probes the layer itself and closes the socket, and run_live.js reconnects with resume_after on
#   a seq gap (docs/live.md, WebSocket).
# The socket timeout bounds a publish to a Redis that stopped answering.
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {
            "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
            "prefix": "rlstudio",
        },
    }
}

# Celery: a real broker always (never eager mode), JSON only, acknowledge after the task ran so a
# worker lost mid-task hands the task to another.
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULE: dict = {}
# A task whose worker died without acking it (SIGKILL, OOM, a lost machine) goes back to its queue
# once it has been unacknowledged this long (kombu's Redis transport restores it; its default is an
# hour, which left a run "submitting" for an hour after a worker crash). Every task is safe to run
# twice (runs.submit_run by its derived submission id, dataset validation by its lock), which also
# covers a task that outlives this timeout and is handed out a second time.
# kombu looks for such tasks on a timer (`unacked_restore_interval`, 10 s) but by default scans Redis
# only on every 10th tick (`unacked_restore_throttle`): up to 100 s more than the timeout, which made
# a redelivery after a killed worker miss a 90 s window under load. One cheap ZRANGE every 10 s.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": _env_int("RLSTUDIO_CELERY_VISIBILITY_TIMEOUT_S", 300),
    "unacked_restore_interval": 10,
    "unacked_restore_throttle": 1,
}
# Publishing fails fast when Redis is unreachable: a launch publishes its submit task from the web
# request, and kombu's defaults wait forever on a Redis that accepts connections but never answers.
# Refused: about 1 s (the retries below); hung: about RLSTUDIO_BROKER_TIMEOUT_S per try. The run then
# waits in the queue and the reconcile sends it once the broker is back (docs/runs.md).
_BROKER_TIMEOUT_S = _env_float("RLSTUDIO_BROKER_TIMEOUT_S", 3.0)
# The ingest's broadcast to the run's viewers (after commit, inside the trainer's POST) gives up after
# this long: a hung Redis must not hold the trainer's POSTs for the layer's 30 s socket timeout. The
# events are stored; viewers get them by replay (the layer watch and the page's gap check reconnect).
RLSTUDIO_BROADCAST_TIMEOUT_S = _env_float("RLSTUDIO_BROADCAST_TIMEOUT_S", 3.0)
# Every open websocket of a signed-in user (run, playground, notifications) reads its user and their
# access from the database again this often and closes with 4403 once they are lost
# (accounts.sockets.RecheckedSocket): access revoked without a group message (a bulk update(), a
# sharing change made without the services) ends within this many seconds.
RLSTUDIO_SOCKET_RECHECK_S = _env_float("RLSTUDIO_SOCKET_RECHECK_S", 30.0)
if not RLSTUDIO_SOCKET_RECHECK_S > 0:
    raise ValueError(f"RLSTUDIO_SOCKET_RECHECK_S must be > 0 seconds (got {RLSTUDIO_SOCKET_RECHECK_S})")
CELERY_BROKER_CONNECTION_TIMEOUT = _BROKER_TIMEOUT_S
CELERY_BROKER_TRANSPORT_OPTIONS.update(
    socket_connect_timeout=_BROKER_TIMEOUT_S,
    socket_timeout=_BROKER_TIMEOUT_S,
)
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.25,
                                    "interval_max": 0.5}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: its WWW-Authenticate header turns "not logged in" into a 401.
        "rlstudio.accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rlstudio.api.pagination.CountResultsPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "rlstudio.api.errors.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": [
        "rlstudio.api.parsers.JSONParser",  # DRF's, with too deeply nested JSON a 400
        "rest_framework.parsers.MultiPartParser",
        "rest_framework.parsers.FormParser",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "RL Studio API",
    "DESCRIPTION": "Datasets, models, configs, runs and their telemetry (docs/api.md in the repository).",
    "VERSION": RLSTUDIO_VERSION,
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "rlstudio.runs.models.RunStatus",
        "DatasetStatusEnum": "rlstudio.catalog.models.DatasetStatus",
        "RegistryStatusEnum": "rlstudio.registry.models.RegistryStatus",
        "RewardKindEnum": "rlstudio.registry.models.RewardKind",
        "EvaluationStatusEnum": "rlstudio.evaluations.models.EvaluationStatus",
        "SweepModeEnum": "rlstudio.sweeps.models.SweepMode",
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"without_traceback": {"()": "rlstudio.config.logfilters.WithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler"},
                 "console_one_line": {"class": "logging.StreamHandler", "filters": ["without_traceback"]}},
    "root": {"handlers": ["console"], "level": "INFO"},
    # A request naming a host not in ALLOWED_HOSTS (a scanner, a probe by IP) is one line saying which
    # host, not a traceback per request.
    # django-axes's start-up banner ("AXES: BEGIN version ...") is left out of every process's log and of
    # the commands' output (make run relays rlstudio_stop_runs's lines); its lockout messages stay.
    "loggers": {"django.security.DisallowedHost": {"handlers": ["console_one_line"], "propagate": False},
                "axes.apps": {"level": "WARNING"}},
}

# --- Tunables (each overridable by the environment variable of the same name, read through
# rlstudio.config.env so the web server, the Celery worker and the tests see the same values).
from rlstudio.config.env import env_float, env_int, env_paths, env_str  # noqa: E402
from trainer.events.schema import MAX_EVENT_BYTES as _TRAINER_MAX_EVENT_BYTES  # noqa: E402

# Catalog: upload and validation limits.
RLSTUDIO_MAX_UPLOAD_BYTES = env_int("RLSTUDIO_MAX_UPLOAD_BYTES", 1 << 30)  # 1 GiB, the stored file
RLSTUDIO_MAX_LINE_BYTES = env_int("RLSTUDIO_MAX_LINE_BYTES", 8 << 20)  # one JSONL line / CSV record
RLSTUDIO_MAX_NESTING_DEPTH = env_int("RLSTUDIO_MAX_NESTING_DEPTH", 32)  # JSON nesting in one row
RLSTUDIO_MAX_DECOMPRESSED_BYTES = env_int("RLSTUDIO_MAX_DECOMPRESSED_BYTES", 4 << 30)  # gzip / zip
RLSTUDIO_MAX_JSON_DOCUMENT_BYTES = env_int("RLSTUDIO_MAX_JSON_DOCUMENT_BYTES", 256 << 20)  # .json
# Where registered model folders may live (absolute paths, colon- or comma-separated); the demo model is
# built under STATE_DIR/models.
RLSTUDIO_MODEL_ROOTS = env_paths("RLSTUDIO_MODEL_ROOTS", [str(STATE_DIR / "models")])

# Registry (docs/security.md): folders an operator's reward-function files may live in (colon- or
# comma-separated), and how long the check of a reward function or tool set may run before it is killed
# (seconds).
RLSTUDIO_REWARD_ROOTS = env_paths("RLSTUDIO_REWARD_ROOTS", [str(STATE_DIR / "rewards")])
RLSTUDIO_REGISTRY_CHECK_TIMEOUT_S = env_float("RLSTUDIO_REGISTRY_CHECK_TIMEOUT_S", 20)

# Telemetry: one POST to /api/v1/runs/{id}/events/: its (decompressed) body, its number of events,
# one event.
RLSTUDIO_INGEST_MAX_REQUEST_BYTES = env_int("RLSTUDIO_INGEST_MAX_REQUEST_BYTES", 16 << 20)
RLSTUDIO_INGEST_MAX_EVENTS = env_int("RLSTUDIO_INGEST_MAX_EVENTS", 10000)
RLSTUDIO_INGEST_MAX_EVENT_BYTES = env_int("RLSTUDIO_INGEST_MAX_EVENT_BYTES", _TRAINER_MAX_EVENT_BYTES)
# What one run may store through the ingest in all (docs/live.md, "Per-run caps"): events of any
# type, sample events, metric rows (steps). Past a cap the ingest refuses the extra events, except the
# status / heartbeat / checkpoint events that keep the run's state right.
RLSTUDIO_RUN_MAX_EVENTS = env_int("RLSTUDIO_RUN_MAX_EVENTS", 20_000_000)
RLSTUDIO_RUN_MAX_SAMPLES = env_int("RLSTUDIO_RUN_MAX_SAMPLES", 5_000_000)
RLSTUDIO_RUN_MAX_METRIC_ROWS = env_int("RLSTUDIO_RUN_MAX_METRIC_ROWS", 1_000_000)
# Quotas: the max_queued_runs a new quota row (and the shipped default quota) starts with.
RLSTUDIO_DEFAULT_MAX_QUEUED_RUNS = env_int("RLSTUDIO_DEFAULT_MAX_QUEUED_RUNS", 5)
# Quotas: the dataset storage (GB, 10**9 bytes) a new quota row (and the shipped default quota) starts
# with; each quota's dataset_storage_gb is then the admin's (0: no new uploads).
RLSTUDIO_DEFAULT_DATASET_STORAGE_GB = env_float("RLSTUDIO_DEFAULT_DATASET_STORAGE_GB", 20)
# Caps per user, staff included (docs/security.md, "Limits"): saved run configs and personal API tokens.
RLSTUDIO_MAX_SAVED_CONFIGS_PER_USER = env_int("RLSTUDIO_MAX_SAVED_CONFIGS_PER_USER", 200)
RLSTUDIO_MAX_API_TOKENS_PER_USER = env_int("RLSTUDIO_MAX_API_TOKENS_PER_USER", 20)
# The most runs one sweep may launch (each also counts against its owner's queued-runs cap).
RLSTUDIO_MAX_SWEEP_RUNS = env_int("RLSTUDIO_MAX_SWEEP_RUNS", 16)
# Projects a user may own (staff included).
RLSTUDIO_MAX_PROJECTS_PER_USER = env_int("RLSTUDIO_MAX_PROJECTS_PER_USER", 100)
# Every sample of a run is also appended to <dir>/<run id>/rollouts/step_<n>.jsonl (retention only
# trims the database, never these files).
RLSTUDIO_ROLLOUT_DIR = env_str("RLSTUDIO_ROLLOUT_DIR", str(RUNS_DIR))
# plotly.js is served from the installed plotly wheel as static/vendor/plotly.min.js (no CDN).
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "rlstudio.telemetry.staticfinders.PlotlyFinder",
]

# Runs: launching, stopping, reconciling runs on Ray.
# The base URL the trainer reaches the platform at (its ingest endpoint).
RLSTUDIO_PUBLIC_URL = env_str("RLSTUDIO_PUBLIC_URL", f"http://127.0.0.1:{PORT}")
# Seconds between SIGTERM (graceful: finish the step, checkpoint, exit) and the forced SIGKILL.
RLSTUDIO_STOP_GRACE_S = env_float("RLSTUDIO_STOP_GRACE_S", 60)
# `make run`'s Ctrl-C: seconds it waits for the active runs it stops with a checkpoint (0: none stopped).
RLSTUDIO_SHUTDOWN_STOP_S = env_float("RLSTUDIO_SHUTDOWN_STOP_S", 60)
# How long a run's trainer may spend at exit flushing events to an unreachable ingest endpoint.
RLSTUDIO_INGEST_CLOSE_TIMEOUT_S = env_float("RLSTUDIO_INGEST_CLOSE_TIMEOUT_S", 10)
# Trackers (docs/security.md, "Trackers"): the operator's W&B and MLflow. A platform run may list wandb /
# mlflow in trainer.logger only where the operator configured it here (W&B: an API key; MLflow: a tracking
# URI); the address and any secret come from here only, never from a user. Secrets reach a run's job in
# owner-only files of its folder (rlstudio.runs.trackers), never in Ray's job environment.
RLSTUDIO_WANDB_API_KEY = env_str("RLSTUDIO_WANDB_API_KEY", "")
RLSTUDIO_WANDB_BASE_URL = env_str("RLSTUDIO_WANDB_BASE_URL", "")
RLSTUDIO_WANDB_ENTITY = env_str("RLSTUDIO_WANDB_ENTITY", "")
RLSTUDIO_MLFLOW_TRACKING_URI = env_str("RLSTUDIO_MLFLOW_TRACKING_URI", "")
RLSTUDIO_MLFLOW_TRACKING_TOKEN = env_str("RLSTUDIO_MLFLOW_TRACKING_TOKEN", "")
RLSTUDIO_MLFLOW_TRACKING_USERNAME = env_str("RLSTUDIO_MLFLOW_TRACKING_USERNAME", "")
RLSTUDIO_MLFLOW_TRACKING_PASSWORD = env_str("RLSTUDIO_MLFLOW_TRACKING_PASSWORD", "")
# A running run whose newest heartbeat (events.jsonl / ingest) is older than this is marked lost.
RLSTUDIO_HEARTBEAT_TIMEOUT_S = env_float("RLSTUDIO_HEARTBEAT_TIMEOUT_S", 120)
# A running run whose trainer has sent no event at all this long after the run started (Ray took the
# job) is marked lost: start-up (imports, model load) can take minutes on a busy node.
RLSTUDIO_RUN_STARTUP_TIMEOUT_S = env_float("RLSTUDIO_RUN_STARTUP_TIMEOUT_S", 600)
# Seconds between two reconciles (Celery beat); job log lines kept as a failed run's error_log.
RLSTUDIO_RECONCILE_INTERVAL_S = env_float("RLSTUDIO_RECONCILE_INTERVAL_S", 3)
RLSTUDIO_ERROR_LOG_LINES = 30
# A run's job-log download (GET /api/v1/runs/{id}/job-log/?download=1) stops after this many bytes of
# the driver log and says so on its last line (the tail, ?tail=N, reads only the log's last 256 KiB).
RLSTUDIO_JOB_LOG_DOWNLOAD_MAX_BYTES = env_int("RLSTUDIO_JOB_LOG_DOWNLOAD_MAX_BYTES", 64 << 20)
# The most runs one bulk delete takes (POST /api/v1/runs/bulk-delete/, the runs list's Delete selected).
RLSTUDIO_RUNS_BULK_DELETE_MAX = env_int("RLSTUDIO_RUNS_BULK_DELETE_MAX", 100)
# A run submitting this long without a Ray job has lost its submit task: the reconcile re-sends it
# (at most RLSTUDIO_SUBMIT_MAX_RESENDS times, each with a new timeout), then marks the run failed.
RLSTUDIO_SUBMIT_TIMEOUT_S = env_float("RLSTUDIO_SUBMIT_TIMEOUT_S", 120)
RLSTUDIO_SUBMIT_MAX_RESENDS = env_int("RLSTUDIO_SUBMIT_MAX_RESENDS", 2)
# A dataset `validating` this long with no validator holding it had its task lost or never sent
# (broker down at upload): Celery beat re-sends it (catalog.resend_validations, every 30 s).
RLSTUDIO_VALIDATION_RESEND_S = env_float("RLSTUDIO_VALIDATION_RESEND_S", 60)
# A queued export whose task was sent this long ago and that no worker took is sent again (a lost message).
RLSTUDIO_EXPORT_RESEND_S = env_float("RLSTUDIO_EXPORT_RESEND_S", 300)
# CPUs Ray reserves for one run's entrypoint (the trainer's driver process).
RLSTUDIO_RUN_NUM_CPUS = 1
# torch threads a run's processes use (the platform sets trainer.torch_threads; users cannot):
# 0 = torch's default, the machine's cores.
RLSTUDIO_RUN_TORCH_THREADS = env_int("RLSTUDIO_RUN_TORCH_THREADS", 0)
# GPUs of one node of the Ray cluster: a run with more GPUs spans whole nodes of this many
# (trainer.nnodes = gpus / this, one placement bundle per node); fewer fit on one node.
RLSTUDIO_GPUS_PER_NODE = env_int("RLSTUDIO_GPUS_PER_NODE", 8)
# Bounds on one training step as a whole (runs.gate.sizes.check_step_size, when a run's config is built: new,
# clone, resume, saved config): trajectories per generation batch (data.train_batch_size, or
# data.gen_batch_size with dynamic sampling, x actor_rollout_ref.rollout.n), those x (prompt + response
# length) tokens, and samples reported per step (report.samples_per_step; -1 = every trajectory). The
# defaults let verl's GSM8K GRPO (1024 x 5, 512 + 1024 tokens) and DAPO (512 x 16 trained, generation
# batches of 1536 x 16, 2048 + 20480 tokens: 24,576 trajectories, 554M tokens) examples in.
RLSTUDIO_MAX_TRAJECTORIES_PER_STEP = env_int("RLSTUDIO_MAX_TRAJECTORIES_PER_STEP", 32_768)
RLSTUDIO_MAX_TOKENS_PER_STEP = env_int("RLSTUDIO_MAX_TOKENS_PER_STEP", 1024 * 1024 * 1024)
RLSTUDIO_MAX_REPORTED_SAMPLES_PER_STEP = env_int("RLSTUDIO_MAX_REPORTED_SAMPLES_PER_STEP", 1024)
# A run's disk (docs/security.md, "A run's disk"): checkpoints one run keeps at most, written into
# trainer.max_ckpt_to_keep_cap (the trainer keeps min(trainer.max_actor_ckpt_to_keep, this); a larger
# user value is refused when a config is built; 0 = no cap, verl's keep-all), and the GiB a run's
# folder may hold after a checkpoint, written into trainer.disk_budget_gb (over it the trainer prunes
# to the newest checkpoint, then, still over, fails the run, or keeps the checkpoint the run ends on (a
# stop's or the last step's) with a warning and ends the run stopped or succeeded; a run one checkpoint
# of which is estimated over it is refused at launch, runs.gate.disk.check_checkpoint_size; 0 = no budget).
RLSTUDIO_MAX_CHECKPOINTS_PER_RUN = env_int("RLSTUDIO_MAX_CHECKPOINTS_PER_RUN", 5)
RLSTUDIO_RUN_DISK_BUDGET_GB = env_float("RLSTUDIO_RUN_DISK_BUDGET_GB", 200)
# GiB of one GPU, for the new-run form's memory estimate (runs/memory_estimate.py); the CPU's is the RAM.
RLSTUDIO_GPU_MEMORY_GB = env_float("RLSTUDIO_GPU_MEMORY_GB", 80)

# Web hardening (docs/security.md): login / token throttling, the Content-Security-Policy, request
# body limits enforced before the body is read (rlstudio.config.request_gate).
from .web_hardening import *  # noqa: E402,F401,F403

# Alerts and notifications (docs/alerts.md): Django's mail settings from the environment, webhooks.
from .alerts import *  # noqa: E402,F401,F403

# Playground (docs/user-guide.md, "Playground"): one session answers for at most this many seconds;
# at most this many sessions run on the site at once; models above this many parameters are refused
# (a session runs on the Celery worker's CPU); the Celery queue its task goes to ("" = the default
# queue: then a session holds the one worker while it answers; give it a worker of its own with
# `celery -A rlstudio worker -Q <queue>`).
RLSTUDIO_PLAYGROUND_MAX_S = env_int("RLSTUDIO_PLAYGROUND_MAX_S", 120)
RLSTUDIO_PLAYGROUND_MAX_ACTIVE = env_int("RLSTUDIO_PLAYGROUND_MAX_ACTIVE", PLAYGROUND_MAX_ACTIVE_DEFAULT)
RLSTUDIO_PLAYGROUND_MAX_PARAMS = env_int("RLSTUDIO_PLAYGROUND_MAX_PARAMS", 2_000_000_000)
RLSTUDIO_PLAYGROUND_QUEUE = env_str("RLSTUDIO_PLAYGROUND_QUEUE", "")
# The Celery queue of dataset validations ("" = the default queue: then a large upload's validation, a
# minute or more, holds up run submissions behind it; give it a worker of its own with
# `celery -A rlstudio worker -Q <queue>`, as `make run` does).
RLSTUDIO_DATASETS_QUEUE = env_str("RLSTUDIO_DATASETS_QUEUE", "")
CELERY_TASK_ROUTES = {name: {"queue": queue} for name, queue in (
    ("playground.run_session", RLSTUDIO_PLAYGROUND_QUEUE), ("catalog.validate_dataset", RLSTUDIO_DATASETS_QUEUE))
    if queue}
