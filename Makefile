# Two entry points for a fresh Debian/Ubuntu machine with Python 3.11:
#   make run   -> installs Yak into .venv and starts one broker (data in ./yak-data,
#                 web console on http://127.0.0.1:8080)
#   make test  -> installs the system tools the tests use (kcat, Java, Chromium; Debian
#                 packages), Yak and its test tools into .venv, and runs the whole suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: test-slow test-repeat run test install system-deps lint clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'

run: install
	$(BIN)/yak serve --data-dir ./yak-data --listen 127.0.0.1:9092

system-deps:
	bash scripts/system-deps.sh

test: system-deps install
	$(BIN)/ruff check .
	# Two workers, a test file per worker at a time (module fixtures stay shared): most
	# tests wait on brokers, etcd, Spark or clocks, so two cores run them ~1.4x faster
	# (1402 s vs 2025 s for the whole suite on the shared 2-core machine, 2026-11-24).
	# Tests marked slow (multi-minute cluster failovers, quorum loss) run in test-slow: the
	# whole suite took 1643 s on CI on 2026-11-26, too close to its 30-minute bound.
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not slow" tests

test-slow: system-deps install
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m slow tests

# The tests whose sleeps became waits on a condition (issue 22), N rounds in CI's parallel
# mode: a race that a sleep was hiding shows up as a failure in some round. Every round
# runs; the target fails if any did. `make test-repeat N=5 REPEAT_TESTS="tests/x.py"` for
# others; docs/testing.md records the runs.
N ?= 20
REPEAT_TESTS ?= \
	tests/admin/test_topics.py \
	tests/cluster/test_membership.py::test_lost_lease_is_reported_then_registers_again \
	tests/cluster/test_membership.py::test_sigstop_past_session_is_fenced \
	tests/cluster/test_etcd_client.py::test_kv_range_put_delete \
	tests/cluster/test_etcd_client.py::test_watch_prefix_events \
	tests/cluster/test_etcd_client.py::test_watch_resumes_after_member_restart_without_loss \
	tests/cluster/test_etcd_client.py::test_watch_after_compaction_rereads \
	tests/cluster/test_etcd_client.py::test_watch_on_member_without_leader_is_ended_not_silent \
	tests/cluster/test_inter_broker.py \
	tests/cluster/test_replica_fetcher.py::test_cut_follower_leaves_the_isr_and_rejoins_after_healing \
	tests/cluster/test_replica_fetcher.py::test_empty_follower_restarts_its_log_at_the_leaders_log_start \
	tests/cluster/test_local_kv.py::test_registration_election_and_image_run_on_the_local_backend \
	tests/cluster/test_controller.py::test_simultaneous_contenders_elect_exactly_one \
	tests/broker/test_crash.py \
	tests/broker/test_broker_features.py::test_sigterm_with_a_parked_long_poll_is_prompt \
	tests/broker/test_fetch_out_of_range.py::test_past_log_end_resets_to_latest_and_long_polls \
	tests/broker/test_produce_fetch.py::test_fetch_long_polls_until_an_append \
	tests/wire/test_connection.py::test_a_cancelled_request_poisons_the_connection \
	tests/gateway/test_grpc.py::test_a_client_that_stops_reading_stops_the_fetching \
	tests/gateway/test_ws.py::test_a_client_that_stops_reading_does_not_make_the_server_buffer \
	tests/gateway/test_rest.py::test_long_poll_returns_as_soon_as_data_arrives \
	tests/security/test_gateway_security.py::test_standalone_gateway_uses_the_given_principal

test-repeat: $(BIN)/python
	@fails=0; for i in $$(seq 1 $(N)); do \
	  echo "== test-repeat round $$i of $(N)"; \
	  $(BIN)/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider $(REPEAT_TESTS) \
	    || fails=$$((fails + 1)); \
	done; \
	echo "test-repeat: $$fails of $(N) rounds failed"; test $$fails -eq 0

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) *.egg-info
