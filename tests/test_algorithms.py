"""Each algorithm's own behaviour: search quality against random, warm starts, GA diversity, DQN's env."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import shared
from storetune.runners import Status, make_runner
from storetune.tuner import Campaign, CampaignSpec, History, make_tuner
from storetune.tuner.search.compare import Comparison, CompareSpec, Variant
from storetune.tuner.execution.local import ProcessExecutor

MUST_BEAT_RANDOM = ["ga", "bo", "sa", "auto"]


# The model-based algorithms need a median of about 30 evaluations on BDBC and cost the most per ask; the
# others need up to about 130. Each runs at the budget it needs, with random search's exact curve as the bar.
STUDIES = {("sa", "ga"): (20, 200), ("bo", "auto"): (10, 100)}


@pytest.fixture(scope="module")
def bdbc_study(tmp_path_factory):
    """Each algorithm on BDBC (4 near-optimal configurations of 2,560): its comparison's summary. DQN is not
    here: it does not beat random search at this budget, and bench/compare_algorithms.py reports by how much."""
    db = f"sqlite:///{tmp_path_factory.mktemp('study') / 'h.sqlite'}"
    settings = {"dataset": [str(shared("moot_configs/BDBC.csv"))]}
    out = {}
    for algorithms, (seeds, budget) in STUDIES.items():
        spec = CompareSpec(settings, tuple(Variant.parse_list(",".join(algorithms))), seeds=seeds, budget=budget,
                           stop_at_near_optimal=True)  # the same counts and success curve, sooner
        study = Comparison.create(History(db), spec).run(ProcessExecutor(2))
        out.update({a: (study, study["algorithms"][a]) for a in algorithms})
    return out


@pytest.mark.slow
@pytest.mark.timeout(900)  # the studies run in the first test's setup
@pytest.mark.parametrize("algorithm", MUST_BEAT_RANDOM)
def test_reaches_near_optimal_in_fewer_evaluations_than_random(bdbc_study, algorithm):
    study, ours = bdbc_study[algorithm]
    budget, random = study["budget"], study["random_expected_success_at"]
    # random search without replacement, exactly: its median is past the budget (success 0.28 at 200)
    assert random[-1] < 0.5
    assert ours["median_evals_to_near_optimal"] <= budget, f"{algorithm}: {ours['median_evals_to_near_optimal']}"
    assert ours["success_at"][-1] > random[-1] + 0.2, f"{algorithm}: success {ours['success_at'][-1]} at {budget}"


def _warm(sqlite_url, algorithm):
    history = History(sqlite_url)
    dataset = str(shared("moot_configs/BDBC.csv"))
    base = CampaignSpec(runner="dataset", runner_settings={"dataset": dataset}, budget=40, seed=1)
    first = Campaign.create(history, base)
    first.run()
    other = CampaignSpec(runner="dataset", runner_settings={"dataset": str(shared("moot_configs/PostgreSQL.csv"))},
                         budget=10)
    Campaign.create(history, other).run()  # a different workload: never a warm start for BDBC
    second = Campaign.create(history, CampaignSpec(runner="dataset", runner_settings={"dataset": dataset},
                                                   algorithm=algorithm, budget=5, seed=2, warm_start="same"))
    summary = second.run()
    earlier = {t.config_hash for t in history.trials(first.id)}
    again = {t.config_hash for t in history.trials(second.id)}
    assert not earlier & again  # what was measured is not measured again
    return second.tuner, first.tuner.best.config, summary


@pytest.mark.parametrize("algorithm", ["random", "sa", "ga", "bo", "dqn", "auto"])
def test_warm_start_from_the_same_space_and_workload(sqlite_url, algorithm):
    tuner, best_before, summary = _warm(sqlite_url, algorithm)
    assert len(tuner.observations) == 45  # 40 from the first campaign, 5 of its own
    if algorithm == "sa":
        assert tuner._current is not None
    if algorithm == "ga":
        assert tuner._seeds[0] == best_before  # the population is seeded with the best
    if algorithm == "bo":
        assert len(tuner._optimizer.yi) == 45  # the surrogate was told everything
    if algorithm == "dqn":
        assert tuner.model.replay_buffer.size() > 0  # the replay buffer was pre-filled
    if algorithm == "auto":  # each member warm-started its own way, and was told the portfolio's own results
        assert [len(m.observations) for m in tuner.members] == [45, 45, 45]
        assert tuner.members[1]._seeds[0] == best_before and tuner.members[2]._current is not None
    assert summary.evaluated == 5


def test_ga_reports_diversity_per_generation():
    from storetune.tuner import make_tuner

    runner = make_runner("dataset", dataset=str(shared("moot_configs/BDBC.csv")))
    ga = make_tuner("ga", runner.space, seed=0, direction="min", params={"population_size": "10"})
    for _ in range(60):
        (config,) = ga.ask(1)
        ga.tell(config, runner.run(config, runner.workload, seed=0).metrics["PERF"])
    assert len(ga.diversity) >= 5 and all(0 <= d <= 1 for d in ga.diversity)
    assert ga.diversity[0] > ga.diversity[-1]  # selection narrows the population


def test_dqn_environment_is_a_valid_gymnasium_env():
    from gymnasium.utils.env_checker import check_env

    from storetune.tuner.algorithms.dqn import ConfigurationEnv

    runner = make_runner("dataset", dataset=str(shared("moot_configs/BDBC.csv")))

    def evaluate(config):
        return runner.run(config, runner.workload, seed=0).metrics["PERF"]

    env = ConfigurationEnv(runner.space, evaluate)
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=3)
    for action in range(env.action_space.n):
        moved = env.move(env.config, action)
        assert moved is None or runner.space.contains(moved)
    assert env.observation_space.contains(obs)
    assert np.isfinite(env.step(0)[1])


def test_auto_asks_more_of_the_member_that_finds_better_configurations():
    """The bandit's job (patience 0: it decides every ask): between BO and random search on BDBC, BO's
    proposals beat more earlier results, so after the initial design most asks go to BO."""
    runner = make_runner("dataset", {"dataset": str(shared("moot_configs/BDBC.csv"))})
    means = runner.table.means("PERF")
    shares = []
    for seed in range(3):
        tuner = make_tuner("auto", runner.space, seed=seed, direction="min",
                           params={"members": "bo,random", "patience": 0})
        for _ in range(80):
            config = tuner.ask(1)[0]
            tuner.tell(config, means[config])
        shares.append(tuner.share())
    assert np.mean([s["bo"] for s in shares]) > 0.5, shares
    assert all(s["random"] > 0 for s in shares)  # a member that does worse is still asked now and then


def test_auto_s_random_start_is_bo_s_too():
    """auto:initial_points is the shared random start: after it, the lead BO proposes from its model, not
    from a random start of its own (BO's 10 followed auto's before, whatever auto's said)."""
    runner = make_runner("dataset", {"dataset": str(shared("moot_configs/BDBC.csv"))})
    means = runner.table.means("PERF")
    for initial in (3, 12):
        tuner = make_tuner("auto", runner.space, seed=0, direction="min", params={"initial_points": initial})
        bo = tuner.members[tuner.names.index("bo")]
        for i in range(initial + 2):
            config = tuner.ask(1)[0]
            assert (tuner.picks[-1] == "initial") == (i < initial)
            assert bool(bo._optimizer.models) == (i >= initial)  # BO asked with a model from the first ask on
            tuner.tell(config, means[config])


def test_auto_leads_with_bo_on_a_finite_space_and_with_ga_on_a_real_valued_one():
    from storetune.search_spaces import load_space

    runner = make_runner("dataset", {"dataset": str(shared("moot_configs/BDBC.csv"))})
    means = runner.table.means("PERF")
    tuner = make_tuner("auto", runner.space, seed=0, direction="min", params={"patience": 1000})
    for _ in range(40):
        config = tuner.ask(1)[0]
        tuner.tell(config, means[config])
    assert tuner.share() == {"initial": 0.125, "bo": 0.875, "ga": 0.0, "sa": 0.0}  # 5 random, then the lead asks
    admission = make_tuner("auto", load_space("admission"), seed=0, direction="min")  # real-valued
    assert admission.names[admission.lead] == "ga"
    # GA as a member breeds without model immigrants (BO is the portfolio's model), unless asked to
    assert admission.members[admission.lead].params.model_immigrants == 0
    asked = make_tuner("auto", load_space("admission"), seed=0, direction="min", params={"ga_model_immigrants": 2})
    assert asked.members[asked.names.index("ga")].params.model_immigrants == 2
    from storetune.search_spaces.catalog import space_from_dict
    from storetune.tuner.algorithms.base import LIST_LIMIT

    options = [{"name": f"o{i}", "kind": "categorical", "values": [0, 1]} for i in range(17)]
    large = space_from_dict({"name": "large", "parameters": options})
    assert large.finite and large.cardinality() > LIST_LIMIT  # too many to list: BO samples the space itself
    tuner = make_tuner("auto", large, seed=0, direction="min")
    assert tuner.names[tuner.lead] == "bo"
    for _ in range(12):  # past the initial design the lead proposes from its model
        config = tuner.ask(1)[0]
        tuner.tell(config, float(sum(config.values())))
    assert tuner.picks[-2:] == ["bo", "bo"]
    # a space too large to list hands over to the bandit after 20 evaluations without a new best, as any other
    assert (tuner.patience, make_tuner("auto", runner.space, seed=0, direction="min").patience) == (20, 20)
    assert make_tuner("auto", large, seed=0, direction="min", params={"patience": 30}).patience == 30
    with pytest.raises(ValueError, match="not among the members"):
        make_tuner("auto", runner.space, seed=0, direction="min", params={"members": "ga,sa", "lead": "bo"})
    greedy = make_tuner("auto", runner.space, seed=0, direction="min", params={"bo_acq": "PI"})
    assert [m.params.acq for m in greedy.members if m.name == "bo"] == ["PI"]
    assert [m.params.acq for m in tuner.members if m.name == "bo"] == ["EI"]
    with pytest.raises(ValueError, match="bo_acq"):
        make_tuner("auto", runner.space, seed=0, direction="min", params={"bo_acq": "UCB"})


def replay(space, means, targets, *, seed, params, budget, algorithm="bo"):
    """An algorithm on a table's means until it measures a near-optimal configuration: (evaluations to it or
    None, the tuner)."""
    from storetune.tuner.analysis.convergence import evaluations_to_hit

    tuner = make_tuner(algorithm, space, seed=seed, direction="min", params=params)
    evaluated = []
    for _ in range(budget):
        config = tuner.ask(1)[0]
        tuner.tell(config, means[config])
        evaluated.append(config)
        if config in targets:
            break
    return evaluations_to_hit(evaluated, targets), tuner


def test_bo_refits_its_kernel_from_several_starts_and_escapes_a_wrong_basin():
    """BDBC seed 42 got BO stuck (bench/SEARCH.md, "Why BO got stuck"): refitted from the previous fit only, the
    kernel kept page size 1K (pS1K) inert, and EI exploited a basin ranked 129 of 2,560 for 150 evaluations.
    Restarted refits find the better likelihood optimum, in which pS1K matters."""
    from storetune.tuner.analysis.convergence import near_optimal

    runner = make_runner("dataset", {"dataset": str(shared("moot_configs/BDBC.csv"))})
    means = runner.table.means("PERF")
    targets = near_optimal(means, "min")
    single, _ = replay(runner.space, means, targets, seed=42, params={"restarts": 0}, budget=200)
    assert single is None  # the failure this guards against: no near-optimal configuration in 200
    hit, tuner = replay(runner.space, means, targets, seed=42, params={}, budget=200)
    assert hit is not None and hit <= 100
    encoded = runner.space.encode(next(iter(targets)))
    assert tuner.params.restarts >= 1 and len(encoded) == len(tuner._kernel.k1.k2.length_scale)


def test_bo_doubting_model_frees_a_stall_on_an_interacting_pair(tmp_path):
    """On a synthetic table nobody tuned on (bench/synthetic_tables.py, seed 2001), BO seed 14 settles 6% from
    the best: the near-optimal configurations need o8 on and o10 off together, and near the incumbent o10
    alone changes the time by under 1%, so the kernel holds its length scale near the bound (inert) and EI
    never proposes the pair. With ``doubt_after`` the stalled search also asks a model whose length scales
    are capped, which cannot call o10 inert (bench/SEARCH.md, "BO's stalls on a table nobody tuned on")."""
    import importlib.util

    from conftest import ROOT
    from storetune.tuner.analysis.convergence import near_optimal

    spec = importlib.util.spec_from_file_location("synthetic_tables", ROOT / "bench" / "synthetic_tables.py")
    synthetic = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(synthetic)
    synthetic.write(tmp_path / "synthetic-2001.csv", *synthetic.table(2001))
    runner = make_runner("dataset", {"dataset": str(tmp_path / "synthetic-2001.csv")})
    means = runner.table.means("Performance")
    targets = near_optimal(means, "min")

    stuck, tuner = replay(runner.space, means, targets, seed=14, params={}, budget=150)
    assert stuck is None  # the stall this guards against
    names = [p.name for p in runner.space.parameters]
    length = dict(zip(names, tuner._optimizer.models[-1].kernel_.k1.k2.length_scale))
    assert length["o10"] > 10 * length["o8"]  # the model holds o10 inert
    hit, _ = replay(runner.space, means, targets, seed=14, params={"doubt_after": 15}, budget=150)
    assert hit is not None  # within the 150 evaluations where the fitted model alone found nothing
    with pytest.raises(ValueError, match="needs acq=EI and surrogate=gp"):  # not ignored in silence
        make_tuner("bo", runner.space, seed=0, direction="min", params={"doubt_after": 15, "acq": "LCB"})


def test_bo_revisiting_rarely_measured_values_frees_a_stall_on_7z():
    """Every near-optimal 7z configuration compresses with LZMA2. In some seeds BO measures LZMA2 a few times
    early, its kernel writes the method off, and it settles on another method for all 200 evaluations. With
    ``revisit_after`` the stalled search measures the incumbent's one-option neighbour whose new value was
    measured least often, and finds a near-optimal configuration (bench/SEARCH.md, "BO's stalls on 7z"). 7z is
    beyond ``LIST_LIMIT``, where that is BO's default; on a listed space (BDBC) it is off.
    Which seeds stall depends on the numerical libraries' last digits: seed 4 did until a fresh install
    (2026-11-28: numpy 2.4.6, scikit-learn 1.9.1, scipy 1.17.1), where seed 15 does (on bZip2) and 4 does not.
    So the first of those that stalls is the case; if none does, the premise is gone and the test says so."""
    from storetune.tuner.algorithms.bayes import LARGE_SPACE_REVISIT_AFTER
    from storetune.tuner.analysis.convergence import near_optimal

    runner = make_runner("dataset", {"dataset": str(shared("moot_configs/7z.csv"))})
    means = runner.table.means(runner.table.default_metric)
    targets = near_optimal(means, "min", 0.9712)
    for seed in (15, 4):
        stuck, tuner = replay(runner.space, means, targets, seed=seed, params={"revisit_after": 0}, budget=200)
        if stuck is None:  # the stall this guards against
            break
    else:
        pytest.fail("neither seed 15 nor 4 stalls without revisits here: find a seed that does (bench/SEARCH.md)")
    assert tuner.best.config["lZMA_lZMA2_pPMd_bZip2_deflate"] != "lZMA2"  # settled on another method
    hit, tuner = replay(runner.space, means, targets, seed=seed, params={}, budget=200)
    assert hit is not None and tuner.revisit_after == LARGE_SPACE_REVISIT_AFTER > 0
    bdbc = make_runner("dataset", {"dataset": str(shared("moot_configs/BDBC.csv"))}).space
    assert make_tuner("bo", bdbc, seed=0, direction="min").revisit_after == 0
    assert make_tuner("bo", bdbc, seed=0, direction="min", params={"revisit_after": 5}).revisit_after == 5


def test_auto_warm_starts_its_members_with_losses_when_the_metric_is_maximised():
    """Members minimise; a warm start of throughputs must reach them as losses, or they would seek the worst."""
    runner = make_runner("dataset", {"dataset": str(shared("moot_configs/BDBC.csv"))})
    means = runner.table.means("PERF")
    configs = list(means)[:30]
    tuner = make_tuner("auto", runner.space, seed=0, direction="max")
    tuner.warm_start([(c, means[c], Status.SUCCEEDED) for c in configs])
    best = max(configs, key=means.get)
    assert tuner.best.config == best
    assert all(m.best.config == best for m in tuner.members)
    assert tuner.members[2]._current == best  # SA starts from the best, not from the worst


def test_auto_retires_bo_past_its_model_limit_and_ga_leads():
    runner = make_runner("dataset", {"dataset": str(shared("moot_configs/BDBC.csv"))})
    means = runner.table.means("PERF")
    tuner = make_tuner("auto", runner.space, seed=0, direction="min", params={"model_limit": 30, "patience": 1000})
    for _ in range(60):
        config = tuner.ask(1)[0]
        tuner.tell(config, means[config])
    bo = tuner.members[0]
    assert len(bo.observations) == 30 and tuner.names[tuner.lead] == "ga"
    assert tuner.picks[-20:] == ["ga"] * 20 and len(tuner.members[1].observations) == 60


def test_ga_restarts_around_its_elite_after_stalling(bdbc):
    from storetune.runners import make_runner
    from storetune.tuner import make_tuner

    runner = make_runner("dataset", dataset=str(bdbc))
    means = runner.table.means("PERF")
    ga = make_tuner("ga", runner.space, seed=3, direction="min", params={"restart_patience": 15})
    never = make_tuner("ga", runner.space, seed=3, direction="min")
    for tuner in (ga, never):
        for _ in range(120):
            (config,) = tuner.ask(1)
            tuner.tell(config, means[config])
    assert ga.restarts >= 1 and never.restarts == 0
    ga._since_best = 15  # stalled now: the next generation is the elite (the best so far) and fresh configurations
    ga._next_generation()
    assert ga.restarts >= 2 and ga._decode(ga._population[0]) == ga.best.config
    assert not any(ga.known(c) for c in map(ga._decode, ga._population[1:]))


def test_ga_breeds_from_the_configurations_a_linear_model_ranks_best(tmp_path):
    """Each generation, ``model_immigrants`` children are replaced by the unmeasured configurations a ridge
    regression of the measurements ranks best: on a table whose options act additively, the best of all."""
    import itertools

    weights = np.linspace(0.1, 1.0, 10)
    rows = ["".join(f"o{i}," for i in range(10)) + "Time-"]
    rows += [",".join(map(str, bits)) + f",{np.exp(weights @ np.array(bits)):.6f}"
             for bits in itertools.product((0, 1), repeat=10)]
    (tmp_path / "additive.csv").write_text("\n".join(rows) + "\n")
    runner = make_runner("dataset", {"dataset": str(tmp_path / "additive.csv")})
    means = runner.table.means("Time")
    best = min(means, key=means.get)
    ga = make_tuner("ga", runner.space, seed=0, direction="min", params={"model_candidates": 1024})
    plain = make_tuner("ga", runner.space, seed=0, direction="min", params={"model_immigrants": 0})
    asked = {}
    for tuner in (ga, plain):
        asked[tuner] = []
        for _ in range(10):  # the first generation: ten random configurations
            (config,) = tuner.ask(1)
            tuner.tell(config, means[config])
            asked[tuner].append(config)
    assert not ga.known(best) and ga.params.model_immigrants == 3
    picks = ga._model_immigrants(3)
    assert picks[0] == best and not any(ga.known(c) for c in picks)
    ga._next_generation()
    assert [ga._decode(ind) for ind in ga._population[-3:]][::-1] == picks  # the last three children, bred from next
    for tuner in (ga, plain):
        for _ in range(10):
            (config,) = tuner.ask(1)
            tuner.tell(config, means[config])
            asked[tuner].append(config)
    assert best in asked[ga][10:] and best not in asked[plain]
    assert plain._model_immigrants(plain.params.model_immigrants) == []


def test_ga_s_model_immigrants_free_it_from_sql_all_measurements_trap():
    """SQL_AllMeasurements is two clusters: 4,042 configurations with 12 to 14 options on, and a small one, no
    fitter on the whole, that holds all five near-optimal ones. A GA's population collapses into a basin of
    the large cluster within about 50 evaluations and breeds there; nothing near it leads out. The model's
    picks read the small effect each of the small cluster's options has on its own, and carry them into the
    population (bench/SEARCH.md, "GA's trap, and the model immigrants that free it")."""
    from storetune.tuner.analysis.convergence import near_optimal

    runner = make_runner("dataset", {"dataset": str(shared("moot_configs/SQL_AllMeasurements.csv"))})
    means = runner.table.means(runner.table.default_metric)
    targets = near_optimal(means, "min", 0.982)
    trapped, _ = replay(runner.space, means, targets, seed=4, params={"model_immigrants": 0}, budget=200,
                        algorithm="ga")
    assert trapped is None  # the trap this guards against
    hit, _ = replay(runner.space, means, targets, seed=4, params={}, budget=200, algorithm="ga")
    assert hit is not None and hit <= 100


@pytest.mark.parametrize("params", [{}, {"model_immigrants": 0}])
def test_ga_asked_for_more_than_the_space_has_left_returns_what_is_left(params):
    """A batch ask larger than the unmeasured rest of a space returns that rest. It used to loop forever:
    a generation whose only new members were already in the batch reset the count of barren generations."""
    from storetune.search_spaces.catalog import space_from_dict

    space = space_from_dict({"name": "sixteen", "parameters": [
        {"name": f"o{i}", "kind": "categorical", "values": [0, 1]} for i in range(4)]})
    ga = make_tuner("ga", space, seed=0, direction="min", params=params)
    first = ga.ask(10)
    for config in first:
        ga.tell(config, float(sum(config.values())))
    rest = ga.ask(20)
    assert len(rest) == len(set(rest)) == 6 and not set(rest) & set(first)


def test_dqn_takes_as_many_gradient_steps_per_result_as_asked(bdbc):
    runner = make_runner("dataset", dataset=str(bdbc))
    means = runner.table.means("PERF")
    for k in (1, 3):
        tuner = make_tuner("dqn", runner.space, seed=0, direction="min",
                           params={"gradient_steps": k, "learning_starts": 0})
        results = []  # the results that trained: every move's (a jump's result trains nothing)
        train = tuner._train
        tuner._train = lambda train=train: (results.append(1), train())
        for _ in range(30):
            (config,) = tuner.ask(1)
            tuner.tell(config, means[config])
        assert results and tuner._steps == k * len(results)


def test_bo_revisits_on_a_device_space_too_large_to_list():
    """storage_v2 (400,320 configurations, with forbidden combinations) is beyond ``LIST_LIMIT``, so BO
    samples its candidates there and, by default, revisits once stalled: its asks stay valid, new and
    within the space's rules, and some of them are revisits."""
    from storetune.search_spaces import load_space
    from test_tuner_contract import toy_loss
    from storetune.tuner.algorithms.base import LIST_LIMIT
    from storetune.tuner.algorithms.bayes import LARGE_SPACE_REVISIT_AFTER

    space = load_space("storage_v2")
    assert space.finite and space.cardinality() > LIST_LIMIT and space.forbidden
    tuner = make_tuner("bo", space, seed=1, direction="min", params={"revisit_after": 3})
    assert make_tuner("bo", space, seed=1, direction="min").revisit_after == LARGE_SPACE_REVISIT_AFTER
    revisits, asked = [], []
    original = tuner._revisit
    tuner._revisit = lambda: revisits.append(original()) or revisits[-1]
    for _ in range(30):
        config = tuner.ask(1)[0]
        assert space.validate(config) == config and config not in asked
        asked.append(config)
        tuner.tell(config, toy_loss(config))
    assert any(r is not None for r in revisits)


def test_bo_keeps_drawing_candidates_on_a_space_whose_rules_forbid_most_draws():
    """On a space too large to list, BO draws its candidates; a batch whose every row a forbidden rule
    rejected used to end the draw, so where 19 draws in 20 are forbidden BO often scored none at all."""
    from storetune.search_spaces.catalog import space_from_dict

    space = space_from_dict({"name": "sparse", "parameters": [
        {"name": "a", "kind": "integer", "low": 0, "high": 19, "default": 0},
        {"name": "c", "kind": "integer", "low": 0, "high": 99999, "default": 0}],
        "forbidden": [{"when": {"a": {"min": 1}}, "reason": "only a=0 is valid"}]})
    tuner = make_tuner("bo", space, seed=1, direction="min", params={"max_candidates": 50})
    assert tuner._members is None  # sampled, not listed
    counts = [len(tuner._candidates()[0]) for _ in range(10)]
    # a batch forbidden whole counts as its size in draws, one with valid rows as those rows (the old draw: 28
    # candidates in all, 3 times none; this one about 12 each time)
    assert min(counts) > 0 and sum(counts) > 60, counts
