"""The report's readable artifacts: matplotlib figures (SVG), HTML pages and the self-contained
atlas map page, each a pure function of the atlas artifacts (atlas.json, map-details.json, the
Parquet tables, provenance.json and the optional MobileNet, Nsight and machine-code tables), so a
replay renders the same bytes as the run it replays.

Modules: style (colours, labels, formats, SVG settings, page CSS), axes (drawing blocks),
figures, frames (nested records as tables), html_blocks (page building blocks), the pages
(atlas_pages: the atlas's own; kernel_pages: Nsight, tuning, machine code; probe_pages: the
probes; pass_pages: the backward passes; compare_pages: records side by side; device_pages: the
map on each GPU), landing (the
landing page's headline), glance (the first screen's figure), atlas_map.
The names below are re-exported so `from groupconv_atlas.study.report import X` keeps working;
importing this package imports every module, so a job that imports it lists them all as code
inputs."""
from .atlas_map import MAP_DATA_MARKER, atlas_map_html, map_payload
from .atlas_pages import (evidence_page, latency_page, per_shape_page, provenance_page,
                          session_page, shapes_page, summary_page, verification_page)
from .axes import ratio_ticks
from .compare_pages import comparison_page
from .device_pages import device_page
from .figures import (aa_figure, boundary_figure, forest_figure, forest_svgs, geomean_figure,
                      mobilenet_figure, note_figure, roofline_figure)
from .frames import mobilenet_readings, tuning_frame
from .glance import glance_figure
from .html_blocks import (Markup, esc, fmt_number, frame_html, html_page, markdown_html,
                          short_kernel_name, table_html)
from .kernel_pages import machine_code_page, nsight_page, tuning_page
from .landing import landing_headline
from .pass_pages import pass_figure, pass_page
from .probe_pages import mobilenet_page, probes_page
from .style import (BASELINE_LABELS, BOUNDARIES, CLASS_COLOURS, CLASS_GLYPHS, PAGE_CSS, SVG_RC,
                    UNTIMED, baseline_label, figure_stem, fmt_interval, fmt_ratio, responsive_svg,
                    styled, svg_bytes)

__all__ = [
    "BASELINE_LABELS", "BOUNDARIES", "CLASS_COLOURS", "CLASS_GLYPHS", "MAP_DATA_MARKER",
    "Markup", "PAGE_CSS", "SVG_RC", "UNTIMED", "aa_figure", "atlas_map_html", "baseline_label",
    "boundary_figure", "comparison_page", "device_page", "esc", "evidence_page", "figure_stem", "fmt_interval",
    "fmt_number",
    "fmt_ratio", "forest_figure", "forest_svgs", "frame_html", "geomean_figure", "glance_figure", "html_page",
    "landing_headline", "latency_page", "machine_code_page", "map_payload", "markdown_html",
    "mobilenet_figure", "mobilenet_page", "mobilenet_readings", "note_figure", "nsight_page", "pass_figure",
    "pass_page", "per_shape_page",
    "probes_page", "provenance_page", "responsive_svg",
    "ratio_ticks", "roofline_figure", "session_page", "shapes_page", "short_kernel_name",
    "styled", "summary_page", "svg_bytes", "table_html", "tuning_frame", "tuning_page",
    "verification_page",
]
