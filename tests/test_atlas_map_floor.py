"""The atlas map's floor layer in headless Chromium, on synthetic map data (test input, not
measurements): with the shapes' measured floor in the cells, "Show: time over the floor" puts
each side's time over the floor in every timed cell; a record without a floor offers the layer
disabled, saying it was not measured. Needs Chromium and Playwright (the `browser` fixture)."""
import pytest
from map_pages import open_map, two_layout_inputs

pytestmark = pytest.mark.integration


def test_the_floor_layer_shows_each_side_s_time_over_the_floor(browser, tmp_path):
    details, atlas = two_layout_inputs()
    for shape in details["shapes"]:
        shape["floor"] = {b: {"floor_copy_us": 4.0, "floor_launch_us": 1.0,
                              "measured_floor_us": 4.0} for b in ("graph_device", "sync_api")}
        for cells in shape["comparisons"].values():
            for cell in cells.values():
                cell["candidate_over_floor"] = cell["candidate_median_us"] / 4.0
                cell["baseline_over_floor"] = cell["baseline_median_us"] / 4.0
    context, page, errors = open_map(browser, tmp_path, details, atlas)
    assert not page.locator("select#view option[value=floor]").is_disabled()
    ratio_text = page.locator("td.cell[data-shape-id=dw-a][data-comparison='k5:torch_best']")
    assert "1.10" in ratio_text.inner_text()
    page.select_option("select#view", "floor")
    cell = page.locator("td.cell[data-shape-id=dw-a][data-comparison='k5:torch_best']")
    # candidate 10 us and baseline 11 us over a 4 us floor
    assert cell.inner_text().startswith("2.50 / 2.75")
    assert float(cell.get_attribute("data-over-floor")) == pytest.approx(2.5)
    assert "time over the floor: k5 2.500" in cell.get_attribute("title")
    page.select_option("select#view", "ratio")
    assert "1.10" in cell.inner_text()
    assert not errors, errors
    context.close()


def test_a_record_without_a_floor_offers_the_layer_disabled(browser, tmp_path):
    context, page, errors = open_map(browser, tmp_path, *two_layout_inputs())
    option = page.locator("select#view option[value=floor]")
    assert option.is_disabled() and "not measured in this record" in option.inner_text()
    assert not page.locator("td.cell[data-over-floor]").count()
    assert not errors, errors
    context.close()
