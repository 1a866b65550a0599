# One entry point for people and CI. Everything installs into .venv from the project's own files.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run cluster test check lint sim soak bench clean compat compat-java bookkeeper

# Two stamps: `make run` installs magnetar and what the broker needs (RUN_STAMP); the tests, the lint, the
# benchmarks and Spark add their extras (STAMP), so that running a broker does not download Spark.
RUN_STAMP := $(VENV)/.installed-run

$(BIN)/pip:
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: magnetar needs Python 3.11" >&2; exit 1; }
	@echo "magnetar setup: creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/pip
	@echo "magnetar setup: installing magnetar and what the broker needs into $(VENV)" \
		"(about 20 seconds from a fresh clone; pip names each package as it goes)"
	$(BIN)/pip install -e .
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml | $(BIN)/pip
	@echo "magnetar setup: installing magnetar and its test, benchmark and Spark dependencies into $(VENV)" \
		"(about a minute from a fresh clone; pip names each package as it goes)"
	$(BIN)/pip install -e '.[test,bench,spark]'
	touch $(STAMP) $(RUN_STAMP)
	@echo "magnetar setup: done; the magnetar command is $(BIN)/magnetar (or magnetar after: source $(BIN)/activate)"

setup: $(STAMP)

# The broker on pulsar://127.0.0.1:$(PORT) and http://127.0.0.1:$(HTTP_PORT), data in $(DATA); other ports
# or another directory with `make run PORT=6651 HTTP_PORT=8081 DATA=data2`. Ctrl-C stops it cleanly (it
# exits 0); make, interrupted by the same Ctrl-C, waits for it and then exits 130, as GNU make does.
PORT ?= 6650
HTTP_PORT ?= 8080
DATA ?= data
run: $(RUN_STAMP)
	@echo "magnetar: the command is $(BIN)/magnetar (try $(BIN)/magnetar --help in another terminal)"
	$(BIN)/magnetar standalone --data-dir $(DATA) --port $(PORT) --http-port $(HTTP_PORT)

# A cluster on this machine (docs/cluster.md, "Try it on one machine"): ZooKeeper, $(BOOKIES) BookKeeper bookies
# and $(BROKERS) brokers, broker i on pulsar://127.0.0.1:$(PORT)+i and http://127.0.0.1:$(HTTP_PORT)+i, its data
# and logs in a new temporary directory it prints. What the broker needs is make run's (no test extras),
# plus BookKeeper's and ZooKeeper's jars. Ctrl-C stops the brokers, the bookies, then ZooKeeper.
BROKERS ?= 3
BOOKIES ?= 3
cluster: $(RUN_STAMP) bookkeeper
	$(BIN)/magnetar local-cluster --brokers $(BROKERS) --bookies $(BOOKIES) --port $(PORT) --http-port $(HTTP_PORT)

# The lint first: a finding fails the run (and CI) before the tests. The simulators' seed sweeps
# (tests/sim) run on one core beside the rest of the suite, which waits on broker processes, clients and
# timeouts for part of its time: it runs on $(TEST_WORKERS) pytest-xdist workers (three, in a run whose
# cluster suites were not yet kept to one worker, held the load at 7 and failed 6 tests), scheduled as
# tests/conftest.py says (the cluster suites one after another, a module's tests on one worker). The core's
# sweep runs $(TEST_SIM_SCHEDULES) schedules per Key_Shared mode here (its own default is 10,000, make soak
# runs 200,000): at 10,000 its three sweeps alone took 24 of the 35 minutes make test keeps to. The
# simulators' report follows.
TEST_WORKERS ?= 2
TEST_SIM_SCHEDULES ?= 5000
test: setup lint compat bookkeeper console-browser
	@mkdir -p build
	MAGNETAR_SIM_PROCESSES=1 MAGNETAR_SIM_SCHEDULES=$(TEST_SIM_SCHEDULES) $(BIN)/python -m pytest tests/sim -q --durations=10 > build/test-sim.log 2>&1 & sim=$$!; \
	trap 'kill $$sim 2>/dev/null' INT TERM; \
	$(BIN)/python -m pytest tests -q --durations=40 --ignore=tests/sim -n $(TEST_WORKERS); rest=$$?; \
	wait $$sim; sim_status=$$?; \
	echo "--- tests/sim (ran beside the rest; its output is in build/test-sim.log)"; cat build/test-sim.log; \
	test $$rest -eq 0 && test $$sim_status -eq 0

# The fast tier, to run before every commit: the lint, then every test that needs no broker process, no JVM
# and no Spark (unit and property tests, the storage crash tests, the simulators with fewer schedules, the
# repository's self-containment), in about three minutes on 2 cores. The shell simulator's sweep needs 150
# schedules per mode (50 for the older modes) to find the reorderings those modes are known for; fewer
# find none and fail. make test remains the whole suite.
CHECK_TESTS := tests/unit tests/sim tests/storage tests/docs/test_self_contained.py
check: lint
	MAGNETAR_SIM_SCHEDULES=300 MAGNETAR_SHELL_SCHEDULES=150 $(BIN)/python -m pytest $(CHECK_TESTS) -q -p no:cacheprovider

# ruff (lint and format) and mypy, configured in pyproject.toml: strict for core/ and protocol/ and positions.
lint: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

# The compatibility suites' programs with the official clients (tests/compat). Java: the classes and the
# classpath of pulsar-client and pulsar-client-admin 4.0.x; Maven's repository is build/m2, so a clean
# clone downloads once and later builds resolve from it.
JAVA_COMPAT_CLASSPATH := build/compat/java/classpath.txt
compat: compat-java
compat-java: $(JAVA_COMPAT_CLASSPATH)
$(JAVA_COMPAT_CLASSPATH): compat/java/pom.xml $(wildcard compat/java/src/main/java/dev/magnetar/compat/*.java)
	@command -v mvn >/dev/null || { echo "mvn not found: the Java compatibility suite needs Maven 3.8+" >&2; exit 1; }
	@command -v java >/dev/null || { echo "java not found: the Java compatibility suite needs Java 17" >&2; exit 1; }
	mvn -B -q -f compat/java/pom.xml -Dmaven.repo.local=$(CURDIR)/build/m2 compile dependency:build-classpath \
		-Dmdep.outputFile=$(CURDIR)/$@.tmp
	mv $@.tmp $@

# BookKeeper 4.18.0 for tests/bookkeeper: ZooKeeper and the bookies the fixture starts, BookieShell, and
# compat/bookkeeper's LedgerWriter (the Java client writing ledgers for the Python client to read). The
# jars land in build/m2 like the Java compatibility suite's (about 105 MB, once).
BOOKKEEPER_CLASSPATH := build/bookkeeper/classpath.txt
bookkeeper: $(BOOKKEEPER_CLASSPATH)
$(BOOKKEEPER_CLASSPATH): compat/bookkeeper/pom.xml $(wildcard compat/bookkeeper/src/main/java/dev/magnetar/bookkeeper/*.java)
	@command -v mvn >/dev/null || { echo "mvn not found: the BookKeeper conformance tests need Maven 3.8+" >&2; exit 1; }
	@command -v java >/dev/null || { echo "java not found: the BookKeeper conformance tests need Java 17" >&2; exit 1; }
	mvn -B -q -f compat/bookkeeper/pom.xml -Dmaven.repo.local=$(CURDIR)/build/m2 compile dependency:build-classpath \
		-Dmdep.outputFile=$(CURDIR)/$@.tmp
	mv $@.tmp $@

# Go: compat/go, built with the official Go client into one program. Its module and build caches are in
# build/go (make clean removes them), so a clean clone downloads the modules once.
GO_COMPAT := build/go/bin/compat-go
GO_ENV := GOMODCACHE=$(CURDIR)/build/go/mod GOCACHE=$(CURDIR)/build/go/cache GOFLAGS=-modcacherw GOTOOLCHAIN=local
.PHONY: compat-go
compat: compat-go
compat-go: $(GO_COMPAT)
$(GO_COMPAT): compat/go/go.mod compat/go/go.sum $(wildcard compat/go/*.go)
	@command -v go >/dev/null || { echo "go not found: the Go compatibility suite needs Go 1.26" >&2; exit 1; }
	cd compat/go && $(GO_ENV) go build -o $(CURDIR)/$@ .

# The console's tests (tests/console) drive the distribution's headless Chromium through its chromedriver:
# installed with apt-get when either is missing (through sudo unless make runs as root).
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
.PHONY: console-browser
console-browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; else \
		command -v apt-get >/dev/null || { echo "chromium and chromedriver not found, and no apt-get: install them to run tests/console" >&2; exit 1; }; \
		echo "magnetar: installing chromium and chromium-driver for the console's tests (apt-get)"; \
		$(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium chromium-driver; \
	fi

# A Java program's classpath for the benchmarks, from its POM ($<) into $@, the jars in build/m2 like the
# compatibility suites'. $(1): what needs it, for the error when Maven or Java is missing.
define maven_classpath
	@command -v mvn >/dev/null || { echo "mvn not found: $(1) needs Maven 3.8+" >&2; exit 1; }
	@command -v java >/dev/null || { echo "java not found: $(1) needs Java 17" >&2; exit 1; }
	mvn -B -q -f $< -Dmaven.repo.local=$(CURDIR)/build/m2 dependency:build-classpath -Dmdep.outputFile=$(CURDIR)/$@.tmp
	mv $@.tmp $@
endef

# Apache Pulsar's own load generator for bench/pulsar_perf.py: pulsar-testclient 4.0.8 (4.0.7's is not
# served) with the two dependencies 4.0.8's POM names at versions not served taken at 4.0.7 (317 jars, once).
PULSAR_PERF_CLASSPATH := build/pulsar-perf/classpath.txt
.PHONY: pulsar-perf
pulsar-perf: $(PULSAR_PERF_CLASSPATH)
$(PULSAR_PERF_CLASSPATH): bench/pulsar_perf/pom.xml
	$(call maven_classpath,pulsar-perf)

# Apache Pulsar's broker for bench/cluster_failover.py --broker pulsar: pulsar-broker 4.0.7 and its jars.
PULSAR_BROKER_CLASSPATH := build/pulsar-broker/classpath.txt
.PHONY: pulsar-broker
pulsar-broker: $(PULSAR_BROKER_CLASSPATH)
$(PULSAR_BROKER_CLASSPATH): bench/pulsar_broker/pom.xml
	$(call maven_classpath,the Pulsar broker)

sim: setup
	$(BIN)/magnetar sim $(if $(SEED),--seed $(SEED),) $(if $(MODE),--mode $(MODE),)

# Long seed sweeps across all cores: the core, 200,000 schedules per Key_Shared mode (40,000 per other
# type); the shell simulator (the real broker), 20,000 per mode; the BookKeeper client's simulation,
# 20,000 schedules; the official client's churn suite against a broker process, 20 seeds per mode and
# batching; and the README's commands with its Spark example, which make test skips (a local Spark session
# alone takes 10 to 30 s to start); then an hour of Key_Shared churn at 5,000 msg/s against one broker
# process, its RSS and descriptors watched (bench/soak_key_shared.py; `--minutes N` for a shorter run).
SOAK_MINUTES ?= 60
soak: setup
	MAGNETAR_SIM_SCHEDULES=200000 $(BIN)/python -m pytest tests/sim/test_sweep.py -q
	MAGNETAR_SHELL_SCHEDULES=20000 $(BIN)/python -m pytest tests/sim/test_shell_sweep.py -q
	MAGNETAR_BK_SCHEDULES=20000 $(BIN)/python -m pytest tests/sim/test_bookkeeper_sim.py -q
	MAGNETAR_CHURN_SEEDS=1-20 $(BIN)/python -m pytest tests/e2e/test_e2e_churn.py -q
	MAGNETAR_README_SOAK=1 $(BIN)/python -m pytest tests/docs/test_readme.py -q
	$(BIN)/python bench/soak_key_shared.py --minutes $(SOAK_MINUTES)

bench: setup
	$(BIN)/python bench/core_dispatch.py
	$(BIN)/python bench/core_join_leave.py
	$(BIN)/python bench/core_draining_memory.py
	$(BIN)/python bench/protocol_sends.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info

# Regenerates src/magnetar/protocol/pulsar_api_pb2.py, pulsar_markers_pb2.py and bookkeeper/data_formats_pb2.py, and
# their type stubs (_pb2.pyi, mypy-protobuf: mypy then checks every message built or read), which are committed so
# that running magnetar needs only `protobuf`. grpcio-tools 1.63.0 carries protoc 26.1, whose output loads on every protobuf >= 5
# that pyproject allows (newer protoc output refuses runtimes older than itself); it installs into
# build/ so that the venv's own protobuf stays as pyproject resolved it.
PROTO_TOOLS := build/grpc-tools
PROTOS := src/magnetar/protocol/pulsar_api.proto src/magnetar/protocol/pulsar_markers.proto src/magnetar/bookkeeper/data_formats.proto src/magnetar/storage/ml_data_formats.proto
.PHONY: proto
proto: setup
	$(BIN)/pip install --quiet --no-deps --target $(PROTO_TOOLS) 'grpcio-tools==1.63.0' 'mypy-protobuf==5.1.0'
	PATH=$(CURDIR)/$(PROTO_TOOLS)/bin:$$PATH PYTHONPATH=$(PROTO_TOOLS) $(BIN)/python -m grpc_tools.protoc -Isrc \
		--python_out=src --mypy_out=src $(PROTOS)
