"""Meta-action detectors (with jitter), scene facts, and the consistency critics."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs import World
from rewards.consistency import consistency_score
from rewards.critics import RulesCritic, claimed_actions, claimed_causes, make_critic, parse_scores
from rewards.critics.http import CriticHTTPError, HTTPCritic
from rewards.meta_actions import MetaActionThresholds, detect, detect_plan, dominant
from rewards.scene import scene_facts
from scenarios import FAMILIES, make_scenario
from tests.rewards.fake_chat import ChatEndpoint, serving

DT = 0.1
T = np.arange(0, 8, DT)


def jitter(xy, sigma, seed):
    return xy + np.random.default_rng(seed).normal(0, sigma, xy.shape)


# --- meta-actions ------------------------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(v=st.floats(4, 20), sigma=st.floats(0, 0.02), seed=st.integers(0, 10**6))
def test_constant_speed_straight_is_keep_speed_keep_lane(v, sigma, seed):
    got = dominant(detect(jitter(np.stack([v * T, 0 * T], 1), sigma, seed), DT))
    assert got == {"keep_speed", "keep_lane"}


@settings(max_examples=25, deadline=None)
@given(
    v=st.floats(6, 20),
    width=st.floats(3.0, 4.0),
    dur=st.floats(3.0, 5.0),
    left=st.booleans(),
    sigma=st.floats(0, 0.02),
    seed=st.integers(0, 10**6),
)
def test_lane_changes_are_found_on_either_side(v, width, dur, left, sigma, seed):
    phase = np.clip((T - 1.5) / dur, 0, 1)
    y = (1 if left else -1) * width * (0.5 - 0.5 * np.cos(np.pi * phase))
    got = dominant(detect(jitter(np.stack([v * T, y], 1), sigma, seed), DT))
    assert ("lane_change_left" if left else "lane_change_right") in got
    assert not {"turn_left", "turn_right", "lane_change_right" if left else "lane_change_left"} & got


@settings(max_examples=20, deadline=None)
@given(radius=st.floats(12, 40), v=st.floats(4, 9), left=st.booleans(), seed=st.integers(0, 10**6))
def test_turns(radius, v, left, seed):
    ang = v * T / radius
    xy = np.stack([radius * np.sin(ang), (1 if left else -1) * radius * (1 - np.cos(ang))], 1)
    got = dominant(detect(jitter(xy, 0.02, seed), DT))
    assert ("turn_left" if left else "turn_right") in got


@settings(max_examples=20, deadline=None)
@given(v0=st.floats(6, 15), decel=st.floats(1.5, 5.0), seed=st.integers(0, 10**6))
def test_braking_to_a_stop(v0, decel, seed):
    t_stop = v0 / decel
    tt = np.minimum(T, t_stop)
    x = v0 * tt - 0.5 * decel * tt**2
    res = detect(jitter(np.stack([x, 0 * T], 1), 0.02, seed), DT)
    got = dominant(res)
    assert "decelerate" in got and "accelerate" not in got
    if t_stop < 6.5:
        assert res["longitudinal_segments"][-1]["label"] == "stop"


def test_start_from_stop_nudges_and_segments():
    x = np.where(T < 2, 0.0, (T - 2) ** 2)
    res = detect(np.stack([x, 0 * T], 1), DT)
    assert [s["label"] for s in res["longitudinal_segments"]][:2] == ["stop", "start_from_stop"]
    y = np.where((T > 2) & (T < 6), 1.0 * np.sin(np.pi * (T - 2) / 4), 0)
    assert "nudge_left" in dominant(detect(jitter(np.stack([8 * T, y], 1), 0.01, 1), DT))
    segs = res["longitudinal_segments"]
    assert segs[0]["start"] == 0.0 and segs[-1]["end"] == pytest.approx(8.0)
    assert all(a["end"] == b["start"] for a, b in itertools.pairwise(segs))


def test_plans_and_thresholds_as_data():
    plan = np.stack([np.arange(1, 65) * 0.1 * 8.0, np.zeros(64), np.zeros(64)], 1)
    assert dominant(detect_plan(plan, 8.0)) == {"keep_speed", "keep_lane"}
    strict = MetaActionThresholds.from_dict({"accel": 0.05, "decel": -0.05})
    assert strict.to_dict()["accel"] == 0.05
    with pytest.raises(ValueError, match="unknown meta-action thresholds"):
        MetaActionThresholds.from_dict({"acel": 1.0})
    with pytest.raises(ValueError, match="non-finite"):
        detect(np.full((10, 2), np.nan))


# --- scene facts -----------------------------------------------------------------------------------------------
def _junction_world(light):
    params = FAMILIES["signalized_intersection"].sample_params(np.random.default_rng(0)) | {"maneuver": "straight"}
    scn = make_scenario("signalized_intersection", params, 0, "j")
    prog = {"phases": [{"state": light, "duration": 100.0}], "offset": 0.0}
    data = scn.model_dump(mode="json") | {"actors": [], "signals": {k: prog for k in scn.signals}}
    return World(scn.model_validate(data))


def test_scene_facts_see_signals_leads_pedestrians_and_curves(smoke):
    w = _junction_world("red")
    for _ in range(60):  # roll towards the light
        w.step(0.0, 0.0)
    facts = scene_facts(w)
    assert facts.signal_ahead["state"] == "red" and {"red_light", "traffic_light", "junction"} <= facts.causes
    lead = World(smoke.get("lead_brake-000"))
    assert scene_facts(lead).lead_vehicle["id"] == "lead"
    curve = World(
        make_scenario(
            "curve", {"radius": 20.0, "angle": 120.0, "direction": "left", "speed_limit": 13.9, "density": 0.0}, 0, "c"
        )
    )
    for _ in range(30):
        curve.step(0.0, 0.0)
    assert scene_facts(curve).curvature_ahead > 0.02 and "curve" in scene_facts(curve).causes
    ped = World(smoke.get("pedestrian_crossing-000"))
    for _ in range(30):
        ped.step(0.0, 0.0)
    d = scene_facts(ped).to_dict()
    assert d["pedestrians"] and "causes" in d


# --- critics --------------------------------------------------------------------------------------------------
CASES = [  # (text consistent with the drive, inconsistent text, executed actions, scene causes)
    (
        "Red light ahead at 18 m, so I decelerate and stop at the stop line.",
        "The light is green, so I accelerate through the intersection.",
        {"decelerate", "stop", "keep_lane"},
        {"red_light", "traffic_light", "junction"},
    ),
    (
        "A parked car blocks my lane; oncoming lane is clear, so I nudge left around it and keep my speed.",
        "A pedestrian is crossing, so I come to a full stop.",
        {"nudge_left", "keep_speed"},
        {"blocked_lane", "stopped_vehicle", "lead_vehicle"},
    ),
    (
        "The lead vehicle brakes hard, so I brake to keep a safe gap.",
        "The road ahead is empty, so I speed up and change lanes to the right.",
        {"decelerate", "keep_lane"},
        {"lead_vehicle"},
    ),
    (
        "Slow lead vehicle ahead; I change lanes to the left to overtake it.",
        "I turn right at the junction because of the stop sign.",
        {"lane_change_left", "keep_speed"},
        {"lead_vehicle"},
    ),
]


@pytest.mark.parametrize("good,bad,executed,causes", CASES)
def test_rules_critic_ranks_consistent_above_inconsistent(good, bad, executed, causes):
    c = RulesCritic()
    g, b = c.score(good, executed, causes), c.score(bad, executed, causes)
    assert g.overall > b.overall
    assert g.behaviour == 1.0 and g.grounding == 1.0


def test_negations_and_parsing():
    assert "pedestrian" not in claimed_causes("There is no pedestrian near the crossing.")
    assert "red_light" not in claimed_causes("The light is not red any more.")
    assert claimed_actions("I will come to a full stop, then proceed.") >= {"stop", "start_from_stop"}
    assert parse_scores("behaviour: 7/10, grounding: 9/10") == pytest.approx((0.7, 0.9))
    assert parse_scores("Behavior=0.8 Grounding = 0.5") == pytest.approx((0.8, 0.5))
    assert parse_scores("behaviour: 80 grounding: 60") == pytest.approx((0.8, 0.6))
    assert parse_scores("I think it is fine") is None


def test_consistency_score_on_a_driven_trajectory():
    x = np.where(T < 4, 8 * T - T**2, 16.0)
    traj = np.stack([x, 0 * T], 1)
    good = consistency_score("Red light ahead: I slow down and stop.", traj, {"red_light"})
    bad = consistency_score("I speed up past the pedestrian.", traj, {"red_light"})
    assert good.overall > bad.overall and "stop" in good.details["executed_actions"]


class _FakeLLM(ChatEndpoint):
    token = "s3cret"

    def respond(self, body):
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            return 401, None
        if len(self.seen) == 1:  # a transient failure the client must retry
            return 503, None
        prompt = body["messages"][0]["content"]
        return 200, "behaviour: 9, grounding: 8" if "decelerate" in prompt else "I cannot tell."


@pytest.fixture
def fake_llm():
    with serving(_FakeLLM) as url:
        yield url


def test_http_critic_retries_batches_caches_and_falls_back(fake_llm):
    critic = make_critic(fake_llm, token="s3cret", backoff=0.01)
    items = [
        ("I decelerate for the red light.", {"decelerate"}, {"red_light"}),
        ("I accelerate.", {"accelerate"}, set()),
    ]
    a, b = critic.score_batch(items)
    assert (a.behaviour, a.grounding) == pytest.approx((0.9, 0.8)) and a.details["parsed"]
    assert b.details["parsed"] is False and b.behaviour == 1.0  # unparseable -> rules critic
    sent = critic.requests
    critic.score(*items[0])
    assert critic.requests == sent  # served from the cache
    with pytest.raises(CriticHTTPError, match="401"):
        HTTPCritic(fake_llm, token="wrong", backoff=0.01).score(*items[1])


def test_http_critic_reports_an_unreachable_endpoint():
    critic = HTTPCritic("http://127.0.0.1:9", retries=1, backoff=0.01, timeout=1.0)
    with pytest.raises(CriticHTTPError, match="failed after 2 tries"):
        critic.score("I stop.", {"stop"}, set())


def test_hf_critic_with_a_tiny_local_model(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    corpus = ["behaviour: 7, grounding: 9", "I decelerate for the red light and stop.", "Executed actions: stop"] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>", pad_token="<eos>")
    fast.save_pretrained(tmp_path)
    cfg = Qwen2Config(
        vocab_size=fast.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
    )
    Qwen2ForCausalLM(cfg).save_pretrained(tmp_path)
    critic = make_critic(f"hf:{tmp_path}", max_new_tokens=8)
    scores = critic.score_batch(
        [("I stop for the red light.", {"stop"}, {"red_light"}), ("I accelerate.", {"stop"}, set())]
    )
    assert len(scores) == 2
    for s in scores:  # a random model answers gibberish: parsed or not, scores stay in [0, 1]
        assert 0.0 <= s.behaviour <= 1.0 and 0.0 <= s.grounding <= 1.0 and "parsed" in s.details
    with pytest.raises(FileNotFoundError, match="does not exist"):
        make_critic(f"hf:{tmp_path / 'missing'}")
    with pytest.raises(ValueError, match="unknown critic"):
        make_critic("gpt")
