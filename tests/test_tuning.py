"""The tuning stage's choice (CPU): only correct, timed variants compete; fastest wins."""
from groupconv.tuning import choose


def _trial(entry, threads, status, median):
    return {"entry": entry, "threads": threads, "rows": 1, "cob": 1, "status": status,
            "median_us": median}


def test_fastest_correct_variant_is_chosen():
    trials = [_trial("a", 256, "correct", 5.0), _trial("b", 128, "incorrect", None),
              _trial("c", 128, "correct", 4.0), _trial("d", 256, "correct", 4.5)]
    assert choose(trials)["entry"] == "c"


def test_an_incorrect_variant_never_wins_even_if_timed():
    trials = [_trial("fast-but-wrong", 256, "incorrect", 1.0), _trial("ok", 256, "correct", 9.0)]
    assert choose(trials)["entry"] == "ok"


def test_no_correct_variant_means_no_choice():
    assert choose([_trial("x", 256, "incorrect", None)]) is None
    assert choose([]) is None


def test_report_tuning_frame_shows_choice_and_gain():
    from groupconv_atlas.study.report import tuning_frame, tuning_page

    build = {"tuning": {"method": "m", "choices": {"s": {
        "rows": 2, "cob": 1, "threads": 128, "entry": "k5_tuned_tile_r2_c1", "median_us": 4.0,
        "untuned_median_us": 6.0, "variants_tried": 8, "variants_correct": 8}}}}
    frame = tuning_frame({"k5": build, "k0": {}})  # an untuned kernel adds no rows
    assert len(frame) == 1
    row = frame.iloc[0]
    assert row["entry"] == "k5_tuned_tile_r2_c1" and row["gain"] == 1.5
    assert "k5_tuned_tile_r2_c1" in tuning_page({"k5": build})
